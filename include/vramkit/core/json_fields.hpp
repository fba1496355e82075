// json_fields: writes an object's fields into a JSON object under keys of the caller's choosing,
// from one table of (key, pointer to member) pairs, for serialisations whose keys are not the
// members' names (e.g. torch.cuda.memory_stats()'s). Works with any JSON type indexed by string
// (nlohmann::json, nlohmann::ordered_json). Example:
//   vramkit::put_fields(j, report, std::pair{"num_ooms", &pool_report::out_of_memory_errors},
//                       std::pair{"streams", &pool_report::streams});
#pragma once

namespace vramkit {

/// Sets j[key] = obj.*member for every (key, member) pair, in order.
template <class Json, class T, class... Fields>
void put_fields(Json& j, const T& obj, const Fields&... fields) {
  ((j[fields.first] = obj.*(fields.second)), ...);
}

}  // namespace vramkit
