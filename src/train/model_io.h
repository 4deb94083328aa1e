// A model directory in Hugging Face's layout: config.json (LlamaConfig keys)
// and model.safetensors (fp32, Hugging Face tensor names). Loadable by
// transformers' LlamaForCausalLM.from_pretrained, and by `--init-from`.
#pragma once

#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "model/config.h"
#include "model/llama.h"

namespace mt {

// One process (no tensor parallelism): writes the model's directory, when
// `write`.
void save_model_dir(const std::string& dir, Llama& model, bool write = true);

// Any layout: `chunks` are this rank's model chunks, `mesh` the run's mesh
// (null: one process). Each rank contributes the pieces of its parameters it
// is the first holder of, placed by each parameter's state_layout
// (copy_to_full, mesh/layout.h), and one sum over the world assembles every
// tensor; only the rank with write = true writes the files. Collective over
// the world.
void save_model_dir(const std::string& dir, const std::vector<Llama*>& chunks, const DeviceMesh* mesh,
                    bool write);

// Writes the directory (config.json of `cfg`, model.safetensors of the full
// parameters `full`, laid out as make_param_table(cfg)), replacing it as a
// whole; what both save_model_dir and `meshtrain export` write.
void write_model_dir(const std::string& dir, const ModelConfig& cfg, const float* full);

// The model configuration stored in dir/config.json (init_std is not stored).
ModelConfig read_model_config(const std::string& dir);

// --init-from's start-up check of dir/config.json (or, for a checkpoint
// directory, its metadata.json's model keys, after its files' checksums)
// against the run's model configuration. Every field that shapes the function (sizes, heads, kv heads,
// tying, rope_theta, norm_eps, max_seq_len, RoPE scaling, experts) must match,
// or ConfigError names the field and both values. `allow` is
// train.init_allow: a comma-separated list of the fields that do not shape a
// tensor (rope_theta, norm_eps, max_seq_len, rope_scaling) that may differ;
// each such difference is returned as a notice (the run's value is used).
std::vector<std::string> check_init_from(const std::string& dir, const ModelConfig& run,
                                         const std::string& allow);

// Loads dir/model.safetensors into the model's parameters: this rank's piece
// of each tensor, cut by its layout. DataError for a missing tensor or a shape
// mismatch; the directory's config.json is checked against the run's at
// start-up (check_init_from) or is the one the model was built from (eval, generate).
void load_model_dir(const std::string& dir, Llama& model);

// Every tensor of `cfg`'s model (its config.json's) present in
// dir/model.safetensors (under its name or the fused MoE name), and every
// tensor there accounted for by one of them; DataError naming them otherwise
// (a config.json of one layer beside weights of two, tie_word_embeddings
// beside an lm_head.weight). Reads the file's header only. load_model_dir
// (eval, generate) and check_init_from (--init-from, at start-up) call it, once
// the config's sizes have passed the run's checks.
void check_model_tensors(const std::string& dir, const ModelConfig& cfg);

// `meshtrain export`: writes the Hugging Face model directory that `--save`
// writes from the training checkpoint `dir` (ckpt/checkpoint.h
// read_checkpoint_model: every slice's checksums checked); one process.
// DataError naming the path if `dir` is not a checkpoint or a file is
// corrupt, IoError if `out` cannot be written.
void export_checkpoint(const std::string& dir, const std::string& out);

}  // namespace mt
