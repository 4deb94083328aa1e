#include "parallel/store_sharding.h"

namespace mt {

StoreSharding store_sharding(int64_t dp, int64_t cp, int zero) {
  if (dp * cp == 1 && zero == 0) return {0, 0};
  return {zero, axis_bit(Axis::dp) | (cp > 1 ? axis_bit(Axis::cp) : 0u)};
}

}  // namespace mt
