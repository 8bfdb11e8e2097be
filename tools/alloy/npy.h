// Minimal NumPy .npy reading and writing for `alloy run` (no Debian/PyPI C++ library for it):
// format versions 1.0-3.0, little-endian or byte-order-free dtypes, C order.
#pragma once
#include <string>

#include "alloy/array.h"

namespace alloy::tools {

/// Reads a .npy file into a CPU array. Throws std::invalid_argument naming the file and what is
/// not supported (Fortran order, big-endian, object or structured dtypes).
Array read_npy(const std::string& path);
/// Writes `a` (any device) as a version 1.0 .npy file.
void write_npy(const std::string& path, const Array& a);

}  // namespace alloy::tools
