// Internal: turns an allocation failure into the exception PyTorch maps to torch.OutOfMemoryError,
// for the pluggable-allocator entry point of the C API. Thread-safe.
#pragma once

#include <string>

namespace vramkit::mr::detail {

/// Called inside a catch handler: throws c10::OutOfMemoryError carrying `message` when a loaded
/// library of the process (PyTorch's libc10) exports what is needed to build one (c10::Error's
/// (SourceLocation, std::string) constructor, OutOfMemoryError's vtable and type_info), so that
/// PyTorch raises torch.OutOfMemoryError with `message`; otherwise rethrows the exception being
/// handled (PyTorch raises a std::exception as RuntimeError with its what()).
[[noreturn]] void rethrow_as_torch_out_of_memory(const std::string& message);

/// True when the process has the libc10 pieces throw_torch_out_of_memory needs (for tests).
[[nodiscard]] bool torch_out_of_memory_available();

}  // namespace vramkit::mr::detail
