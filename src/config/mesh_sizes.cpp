#include "config/mesh_sizes.h"

namespace mt {

MeshSizes mesh_sizes(const ParallelConfig& p) {
  return {.dp = static_cast<int>(p.dp),
          .pp = static_cast<int>(p.pp),
          .cp = static_cast<int>(p.cp),
          .tp = static_cast<int>(p.tp)};
}

}  // namespace mt
