// safe_text: strings that come from the system (process names and command lines, GPU and host
// names, file contents) made safe to print on a terminal or write to a CSV file. Pure functions,
// thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace vramkit::monitor {

/// `s` with every byte a terminal would act on written as a visible escape instead: C0 controls
/// (ESC, BEL, CR, LF, TAB, ...) and DEL as `\xNN`, C1 controls (U+0080..U+009F) as `\u0080`, and
/// bytes that are not valid UTF-8 as `\xNN`; a backslash is doubled so the escapes are
/// unambiguous. Printable UTF-8 passes unchanged. Example: "\x1b]0;owned\a" -> "\x1b]0;owned\x07".
[[nodiscard]] std::string printable(std::string_view s);

}  // namespace vramkit::monitor
