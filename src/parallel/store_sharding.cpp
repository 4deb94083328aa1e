#include "parallel/store_sharding.h"

namespace mt {

StoreSharding store_sharding(int64_t dp, int64_t cp, int zero, int64_t dp_shard) {
  if (dp * cp == 1 && zero == 0) return {0, 0};
  const int hsdp = dp_shard > 0 && dp_shard < dp ? static_cast<int>(dp_shard) : 0;
  return {zero, axis_bit(Axis::dp) | (cp > 1 ? axis_bit(Axis::cp) : 0u), hsdp};
}

}  // namespace mt
