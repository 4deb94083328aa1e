// Which store the trainer gives a chunk, as a rule both the trainer
// (train/train_model.cpp make_store) and the memory model
// (cost/memory_model_parts.cpp checkpoint_staging_floats, the checkpoint's
// staging copy follows the store's sharding) read, so that it is stated once
// (docs/ARCHITECTURE.md "Sizes are data"). It lives in parallel/ beside the
// stores; cost/ reaches parallel/ without the trainer.
#pragma once

#include <cstdint>

#include "parallel/store.h"

namespace mt {

// The sharding of a chunk's store on a mesh of dp × cp ranks at ZeRO stage
// `zero`: group 0 (the model's own LocalStore, nothing sharded) when one rank
// holds all of the state (dp·cp = 1 at ZeRO 0); otherwise a DataParallelStore
// over the dp axis, dp × cp when cp > 1 (what its sharding() returns); with
// HSDP (parallel.dp_shard < dp, data_parallel.h is_hsdp) its pieces over shard groups of dp_shard dp ranks.
StoreSharding store_sharding(int64_t dp, int64_t cp, int zero, int64_t dp_shard = 0);

}  // namespace mt
