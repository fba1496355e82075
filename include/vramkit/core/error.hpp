// Error types of vramkit. Allocation paths throw; platform queries return values (see result.hpp).
// All types are immutable after construction and safe to share between threads.
#pragma once

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace vramkit {

/// Base of every error vramkit throws; what() is one readable line (or a summary block).
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller broke an API contract (freeing a pointer the resource does not own, a wrong size, a
/// release without acquire). The state of the object that threw is unchanged.
class logic_error : public error {
 public:
  using error::error;
};

/// Bad input from the caller's user (a value, a file, a name): what() names the input and what is
/// wrong with it; nothing was changed. `vramkit`'s main maps it to exit code 2.
class invalid_input : public error {
 public:
  using error::error;
};

/// A CUDA runtime call failed; carries the numeric CUDA error code.
class cuda_error : public error {
 public:
  cuda_error(int code, const std::string& message) : error(message), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

/// An allocation could not be satisfied. Derives from std::bad_alloc so generic code that catches
/// allocation failure keeps working; what() carries the request, the resource and its summary.
class out_of_memory : public std::bad_alloc {
 public:
  out_of_memory(std::size_t requested_bytes, std::string resource, std::string detail)
      : requested_bytes_(requested_bytes),
        resource_(std::move(resource)),
        message_("out of memory: " + std::to_string(requested_bytes) + " bytes requested from " +
                 resource_ + (detail.empty() ? std::string{} : "\n" + detail)) {}
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_bytes_; }
  [[nodiscard]] const std::string& resource() const noexcept { return resource_; }

 private:
  std::size_t requested_bytes_;
  std::string resource_;
  std::string message_;
};

}  // namespace vramkit
