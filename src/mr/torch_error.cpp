// c10::OutOfMemoryError built from the symbols of the libc10 already loaded in the process, so
// libvramkit_torch.so neither links nor compiles against PyTorch. c10::OutOfMemoryError adds
// nothing to c10::Error but its type (single, non-virtual inheritance, inherited constructors), so
// an object is c10::Error's exported constructor run on storage larger than any c10::Error, with
// the vtable pointer then set to OutOfMemoryError's, which is what its own constructor does.
#include "mr/torch_error.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cxxabi.h>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <typeinfo>

namespace vramkit::mr::detail {
namespace {

// c10::SourceLocation's layout (c10/util/Exception.h, unchanged since PyTorch 1.0).
struct c10_source_location {
  const char* function;
  const char* file;
  std::uint32_t line;
};

// c10::Error::Error(SourceLocation, std::string), called as a function taking `this` first.
using error_constructor = void (*)(void* self, c10_source_location where, std::string msg);

constexpr const char* constructor_names[] = {
    "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"};
constexpr const char* vtable_name = "_ZTVN3c1016OutOfMemoryErrorE";
constexpr const char* type_info_name = "_ZTIN3c1016OutOfMemoryErrorE";
// Far above sizeof(c10::Error) in every PyTorch release (about 150 bytes on x86-64 in 2.x).
constexpr std::size_t exception_storage_bytes = 4096;

struct c10_symbols {
  error_constructor construct = nullptr;
  void* vtable = nullptr;
  std::type_info* type = nullptr;
  [[nodiscard]] bool complete() const { return construct != nullptr && vtable != nullptr && type; }
};

// Looks every wanted symbol up in each loaded object (PyTorch loads libc10 with RTLD_LOCAL, so
// dlsym(RTLD_DEFAULT) does not see it; the vtable may live in libc10 or libc10_cuda).
int visit(dl_phdr_info* info, std::size_t, void* data) {
  auto& s = *static_cast<c10_symbols*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  if (std::strstr(info->dlpi_name, "c10") == nullptr &&
      std::strstr(info->dlpi_name, "torch") == nullptr) {
    return 0;
  }
  void* h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return 0;
  if (s.construct == nullptr) {
    for (const char* n : constructor_names) {
      if (void* f = dlsym(h, n)) {
        s.construct = reinterpret_cast<error_constructor>(f);
        break;
      }
    }
  }
  if (s.vtable == nullptr) s.vtable = dlsym(h, vtable_name);
  if (s.type == nullptr) s.type = static_cast<std::type_info*>(dlsym(h, type_info_name));
  dlclose(h);  // RTLD_NOLOAD took a reference on an object that stays loaded
  return s.complete() ? 1 : 0;
}

// Found symbols are kept; a miss is looked up again next time (PyTorch may load later).
c10_symbols find_symbols() {
  static std::mutex m;
  static c10_symbols found;
  std::lock_guard lock(m);
  if (!found.complete()) {
    c10_symbols s;
    dl_iterate_phdr(visit, &s);
    if (s.complete()) found = s;
  }
  return found;
}

void destroy(void* p) {
  // The object is a c10::Error (std::exception first, at offset 0): its virtual destructor runs
  // OutOfMemoryError's.
  static_cast<std::exception*>(p)->~exception();
}

}  // namespace

bool torch_out_of_memory_available() { return find_symbols().complete(); }

void rethrow_as_torch_out_of_memory(const std::string& message) {
  const std::exception_ptr original = std::current_exception();
  const c10_symbols s = find_symbols();
  if (s.complete()) {
    void* obj = __cxxabiv1::__cxa_allocate_exception(exception_storage_bytes);
    std::memset(obj, 0, exception_storage_bytes);
    try {
      s.construct(obj,
                  c10_source_location{"vramkit_torch_malloc", "src/mr/torch_error.cpp", __LINE__},
                  message);
    } catch (...) {
      __cxxabiv1::__cxa_free_exception(obj);
      std::rethrow_exception(original);
    }
    // Itanium ABI: the address point of a vtable without virtual bases follows offset-to-top and
    // the type_info pointer.
    *static_cast<void**>(obj) = static_cast<char*>(s.vtable) + 2 * sizeof(void*);
    __cxxabiv1::__cxa_throw(obj, s.type, destroy);
  }
  std::rethrow_exception(original);
}

}  // namespace vramkit::mr::detail
