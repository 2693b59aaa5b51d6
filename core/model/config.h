// ModelConfig: the numbers of a Qwen3 checkpoint, read from its config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

struct ModelConfig {
  int hidden_size = 0;           // d_model
  int intermediate_size = 0;     // MLP width
  int num_layers = 0;            // num_hidden_layers
  int num_heads = 0;             // query heads
  int num_kv_heads = 0;          // key/value heads (GQA: num_heads % num_kv_heads == 0); 32 if not given
  int head_dim = 0;              // read from the file: NOT always hidden_size / num_heads; 128 if not given
  int vocab_size = 0;            // rows of embed_tokens (may exceed the tokenizer's vocabulary)
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000;     // Hugging Face's Qwen3Config default; every Qwen3 release gives 1e6
  bool tie_word_embeddings = false;
  std::string torch_dtype;       // "bfloat16", "float16" or "float32": how the weights are stored ("" = not said)
  std::vector<int> eos_token_ids;  // from config.json and generation_config.json
  int bos_token_id = -1;

  int q_dim() const { return num_heads * head_dim; }      // rows of q_proj
  int kv_dim() const { return num_kv_heads * head_dim; }  // rows of k_proj and v_proj
  int group_size() const { return num_heads / num_kv_heads; }  // query heads per KV head

  // Parameters of the checkpoint (lm_head counted once when tied).
  int64_t parameter_count() const;
};

// Parses config.json text; `source` names the file in error messages.
// Refuses architectures other than Qwen3 and features kvscope does not implement
// (attention bias, rope scaling, sliding windows) with a one-line kvscope::Error.
ModelConfig parse_config(const std::string& json_text, const std::string& source);

// kvscope::Error unless DIR is a folder holding config.json, worded for the person who
// named it: "DIR: no such folder", "DIR: is a file, not a model folder" (with the
// folder to give when the file is in one, e.g. its config.json),
// "DIR: no config.json (not a model folder)".
void check_model_folder(const std::string& model_dir);

// Reads DIR/config.json (after check_model_folder), then adds the EOS ids of
// DIR/generation_config.json if present.
ModelConfig load_config(const std::string& model_dir);

// Reads a single config.json file (e.g. shared/reference/qwen3-32b-config.json). A
// model folder given for it is named as one, with the path to give instead.
ModelConfig load_config_file(const std::string& path);

}  // namespace kvscope
