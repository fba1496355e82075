// Memory requests from declarations, planner JSON and Kubernetes quantities.
#include "vramkit/cluster/memory_request.hpp"

#include <cctype>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {

std::uint64_t parse_memory_request(std::string_view text) {
  const std::uint64_t bytes = parse_bytes(text);
  if (bytes == 0)
    throw invalid_input(fmt::format("invalid memory request '{}': must be above zero", text));
  return bytes;
}

std::uint64_t request_from_plan_json(std::string_view json_text, std::string_view origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception&) {
    throw invalid_input(
        fmt::format("{}: not valid JSON (expected vramkit plan --json output)", origin));
  }
  if (!doc.is_object()) throw invalid_input(fmt::format("{}: expected a JSON object", origin));
  const auto it = doc.find("device_peak_bytes");
  if (it == doc.end()) throw invalid_input(fmt::format("{}: has no device_peak_bytes", origin));
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer() && it->get<std::int64_t>() >= 0) return it->get<std::uint64_t>();
  if (it->is_number_float() && it->get<double>() >= 0 && it->get<double>() < 1.8e19) {
    return static_cast<std::uint64_t>(it->get<double>());
  }
  throw invalid_input(fmt::format("{}: device_peak_bytes must be a non-negative integer", origin));
}

std::uint64_t parse_kube_quantity(std::string_view text) {
  using u128 = unsigned __int128;
  auto fail = [&](const char* why) -> std::uint64_t {
    throw invalid_input(fmt::format("invalid quantity '{}': {}", text, why));
  };
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    if (text[i] == '-') return fail("must not be negative");
    ++i;
  }
  u128 numerator = 0;
  u128 denominator = 1;
  std::size_t digits = 0;
  bool seen_point = false;
  // Quantities carry at most a few dozen digits in practice; 30 keeps the arithmetic in 128 bits.
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !seen_point) {
      seen_point = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    if (++digits > 30) return fail("too many digits");
    numerator = numerator * 10 + static_cast<unsigned>(c - '0');
    if (seen_point) denominator *= 10;
  }
  if (digits == 0) return fail("expected a number, e.g. 24Gi");
  const std::string_view suffix = text.substr(i);
  int binary_shift = 0;
  int decimal_exponent = 0;
  if (suffix.empty()) {
  } else if (suffix == "Ki")
    binary_shift = 10;
  else if (suffix == "Mi")
    binary_shift = 20;
  else if (suffix == "Gi")
    binary_shift = 30;
  else if (suffix == "Ti")
    binary_shift = 40;
  else if (suffix == "Pi")
    binary_shift = 50;
  else if (suffix == "Ei")
    binary_shift = 60;
  else if (suffix == "m")
    decimal_exponent = -3;
  else if (suffix == "k")
    decimal_exponent = 3;
  else if (suffix == "M")
    decimal_exponent = 6;
  else if (suffix == "G")
    decimal_exponent = 9;
  else if (suffix == "T")
    decimal_exponent = 12;
  else if (suffix == "P")
    decimal_exponent = 15;
  else if (suffix == "E")
    decimal_exponent = 18;
  else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::size_t j = 1;
    bool negative = false;
    if (j < suffix.size() && (suffix[j] == '+' || suffix[j] == '-')) negative = suffix[j++] == '-';
    if (j == suffix.size()) return fail("exponent has no digits");
    int e = 0;
    for (; j < suffix.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[j])))
        return fail("exponent is not a number");
      e = e * 10 + (suffix[j] - '0');
      if (e > 40) return fail("exponent out of range");
    }
    decimal_exponent = negative ? -e : e;
  } else {
    return fail("unknown suffix (use Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E, m or an exponent)");
  }
  if (numerator == 0) return 0;
  const u128 limit = u128{std::numeric_limits<std::int64_t>::max()};
  // numerator < 10^30 < 2^100, so a shift of up to 60 would overflow: check against the limit
  // first.
  for (int s = 0; s < binary_shift; s += 10) {
    numerator *= 1024;
    if (numerator / denominator > limit) return fail("too large");
  }
  for (int e = 0; e < decimal_exponent; ++e) {
    numerator *= 10;
    if (numerator / denominator > limit) return fail("too large");
  }
  for (int e = 0; e > decimal_exponent; --e) {
    if (denominator > (u128{1} << 120)) return 1;  // a positive amount below one byte rounds up
    denominator *= 10;
  }
  const u128 whole = (numerator + denominator - 1) / denominator;
  if (whole > limit) return fail("too large");
  return static_cast<std::uint64_t>(whole);
}

}  // namespace vramkit::cluster
