// What the layout's source files (layout.cc, layout_forward.cc,
// layout_rows.cc) share; not part of the API.
#pragma once

#include <cstddef>
#include <string>

#include "kvspec/base/layer_config.h"

namespace kvspec::layout_internal {

// How a refusal names layer i: "layer 'NAME'", or "layer I" without a name.
std::string LayerName(const LayerConfig& c, size_t i);

}  // namespace kvspec::layout_internal
