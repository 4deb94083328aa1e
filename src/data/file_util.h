// Small file helpers shared by the data folder. Every failure is an IoError
// naming the path and the system's message.
#pragma once

#include <cstdint>
#include <string>

namespace mt {

// Whole file as bytes.
std::string read_file(const std::string& path);

// Writes `bytes` to a temporary file in the folder of `path`, flushes it to
// disk and renames it over `path`: readers see the old file or the new one,
// never a partial one.
void write_file_atomic(const std::string& path, const void* data, int64_t bytes);

}  // namespace mt
