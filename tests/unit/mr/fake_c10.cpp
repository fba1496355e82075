// A stand-in for PyTorch's libc10 in CPU tests: the c10 names the pluggable allocator's
// out-of-memory path looks up (c10::Error's (SourceLocation, std::string) constructor and
// c10::OutOfMemoryError's vtable and type_info), with a layout of its own, as a real libc10's is.
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#define FAKE_C10_API __attribute__((visibility("default")))

namespace c10 {

struct SourceLocation {
  const char* function;
  const char* file;
  std::uint32_t line;
};

class FAKE_C10_API Error : public std::exception {
 public:
  Error(SourceLocation where, std::string msg);
  [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string msg_;
  std::string what_;
  const void* caller_ = nullptr;
};

class FAKE_C10_API OutOfMemoryError : public Error {
  using Error::Error;
};

Error::Error(SourceLocation where, std::string msg)
    : msg_(std::move(msg)), what_(msg_ + " (raised from " + where.function + ")") {}

}  // namespace c10

// Makes the compiler emit OutOfMemoryError's vtable and type_info here, as libc10's CPU allocator
// does by throwing one.
extern "C" FAKE_C10_API void fake_c10_throw_out_of_memory() {
  throw c10::OutOfMemoryError({"fake", "fake_c10.cpp", 1}, "fake");
}
