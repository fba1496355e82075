// Version and build facts of this vramkit library.
#pragma once

#include <string>

namespace vramkit {

/// "0.1.0".
std::string version();

/// One line: version, CUDA on/off with the toolkit version it was built with, compiler.
std::string build_summary();

}  // namespace vramkit
