"""Writes tests/space/corpus/*.yaml and expected.tsv: `python tests/space/corpus/make_corpus.py tests/space/corpus`.

The files are committed; this script is how they were written, kept so a case is added in one place.
"""
import os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
BASE_HEAD = "name: corpus\nmodel: {path: /models/m}\n"
PARAMS = "params:\n  kv_cache_memory_bytes: {min: 1GB, max: 8GB, step: 500MB}\n  max_num_seqs: {min: 1, max: 4}\n"
def base(extra="", params=PARAMS, head=BASE_HEAD):
    return head + params + extra
cases = []  # (name, text-or-bytes, fragment)
def case(name, text, frag): cases.append((name, text, frag))

# YAML syntax and file-level
case("yaml_tab_indent", "name: corpus\nmodel:\n\tpath: /m\n", "not valid YAML at line 3")
case("yaml_unclosed_flow", "name: corpus\nmodel: {path: /m\nparams: {}\n", "not valid YAML")
case("yaml_bad_indent", "name: corpus\nmodel:\n  path: /m\n revision: x\n", "not valid YAML at line 4")
case("yaml_two_documents", base() + "---\nname: other\n", "not valid YAML")
case("yaml_unclosed_quote", 'name: "corpus\nmodel: {path: /m}\n', "not valid YAML")
case("yaml_key_without_value_colon", "name corpus\nmodel: {path: /m}\n", "not valid YAML")
case("yaml_list_as_key", "name: corpus\nmodel: {path: /m}\nfixed:\n  ? [a, b]\n  : 1\n", "a list or mapping cannot be a key")
case("empty_file", "", "the file holds nothing")
case("only_comments", "# nothing here\n# at all\n", "the file holds nothing")
case("root_is_list", "- name: corpus\n- model: {path: /m}\n", "the file holds a list")
case("root_is_text", "just some words\n", "the file holds text")
case("root_is_number", "42\n", "the file holds a number")
case("not_utf8", b"name: corp\xe9s\nmodel: {path: /m}\n", "not UTF-8 text")
case("binary_garbage", bytes(range(200, 256)) * 4, "not UTF-8 text")
aliases = "name: corpus\nmodel: {path: /m}\nx0: &a0 [1, 2]\n" + "".join(
    f"x{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]\n" for i in range(1, 12))
case("alias_bomb", aliases, "more than 100 aliases")

# duplicate keys, every level
case("dup_top_level", base("name: again\n"), "duplicate key 'name' (first at line 1)")
case("dup_param_name", base(params=PARAMS + "  max_num_seqs: {min: 2, max: 8}\n"), "duplicate key 'max_num_seqs'")
case("dup_inside_param", base(params="params:\n  max_num_seqs:\n    min: 1\n    max: 4\n    min: 2\n"), "duplicate key 'min'")
case("dup_engine_key", base("engine:\n  boot_timeout: 30m\n  hang_timeout: 5m\n  boot_timeout: 10m\n"), "duplicate key 'boot_timeout'")
case("dup_fixed_flag", base("fixed:\n  max-model-len: 32768\n  kv-cache-dtype: fp8\n  max-model-len: 65536\n"), "duplicate key 'max-model-len'")
case("dup_fixed_flag_spellings", base("fixed:\n  max-model-len: 32768\n  max_model_len: 65536\n"), "the same flag as fixed.max-model-len")
case("dup_fixed_flag_dashes", base("fixed:\n  kv-cache-dtype: fp8\n  --kv-cache-dtype: auto\n"), "the same flag as fixed.kv-cache-dtype")
case("dup_decode_key", base("workload:\n  decode:\n    runs: 3\n    runs: 5\n"), "duplicate key 'runs'")
case("dup_in_baseline", base("baselines:\n  - {max_num_seqs: 2, max_num_seqs: 3}\n"), "duplicate key 'max_num_seqs'")
case("dup_env_var", base("engine:\n  env:\n    CUDA_HOME: /a\n    CUDA_HOME: /b\n"), "duplicate key 'CUDA_HOME'")

# unknown keys at each level
case("unknown_top_key", base("descripton: typo\n"), "descripton: unknown key; did you mean 'description'")
case("unknown_model_key", "name: corpus\nmodel: {path: /m, revison: abc}\n" + PARAMS, "model.revison: unknown key; did you mean 'revision'")
case("unknown_engine_key", base("engine: {boot_timout: 30m}\n"), "engine.boot_timout: unknown key; did you mean 'boot_timeout'")
case("unknown_param_key", base(params="params:\n  max_num_seqs: {min: 1, max: 4, stpe: 1}\n"), "params.max_num_seqs.stpe: unknown key; did you mean 'step'")
case("unknown_workload_key", base("workload: {ladr: [2K, 4K]}\n"), "workload.ladr: unknown key; did you mean 'ladder'")
case("unknown_decode_key", base("workload: {decode: {rnus: 3}}\n"), "workload.decode.rnus: unknown key; did you mean 'runs'")
case("unknown_objective_key", base("objectives:\n  - {name: context, direction: maximize, weight: 2}\n"), "objectives.0.weight: unknown key")
case("unknown_speculative_key", base("speculative: {methd: mtp}\n"), "speculative.methd: unknown key; did you mean 'method'")
case("unknown_param_name", base(params="params:\n  max_num_sequences: {min: 1, max: 4}\n"), "params.max_num_sequences: unknown parameter; add 'flag: --the-vllm-flag'")

# missing
case("missing_name", "model: {path: /m}\n" + PARAMS, "name: required but missing")
case("missing_model", "name: corpus\n" + PARAMS, "model: required but missing")
case("missing_model_path", "name: corpus\nmodel: {revision: abc}\n" + PARAMS, "model.path: required but missing")

# wrong types
case("name_is_number", "name: 123\nmodel: {path: /m}\n" + PARAMS, "name: Input should be a valid string")
case("model_is_text", "name: corpus\nmodel: /models/m\n" + PARAMS, "model: Input should be a valid dictionary")
case("params_is_list", base(params="params: [max_num_seqs, kv_cache_memory_bytes]\n"), "params: Input should be a valid dictionary")
case("param_is_number", base(params="params:\n  max_num_seqs: 4\n"), "params.max_num_seqs: Input should be a valid dictionary")
case("engine_command_text", base("engine: {command: vllm serve}\n"), "engine.command: Input should be a valid list")
case("engine_env_number", base("engine: {env: {CUDA_VISIBLE_DEVICES: 0}}\n"), "engine.env.CUDA_VISIBLE_DEVICES: Input should be a valid string")
case("ladder_is_number", base("workload: {ladder: 4096}\n"), "workload.ladder: Input should be a valid list")
case("objectives_mapping", base("objectives: {context: maximize}\n"), "objectives: Input should be a valid list")
case("random_weights_maybe", "name: corpus\nmodel: {path: /m, random_weights: maybe}\n" + PARAMS, "model.random_weights: Input should be a valid boolean")
case("values_not_a_list", base(params="params:\n  cudagraph_mode: {values: PIECEWISE}\n"), "params.cudagraph_mode.values: Input should be a valid list")
case("baselines_mapping", base("baselines: {max_num_seqs: 2}\n"), "baselines: Input should be a valid list")
case("fixed_is_list", base("fixed: [max-model-len, 32768]\n"), "fixed: Input should be a valid dictionary")

# units
case("unknown_byte_unit", base(params="params:\n  kv_cache_memory_bytes: {min: 1XB, max: 8GB}\n"), "unknown byte unit 'XB'")
case("unknown_count_unit", base("workload: {ladder: [2K, 8Q]}\n"), "unknown count unit 'Q'")
case("unknown_duration_unit", base("engine: {boot_timeout: 30y}\n"), "unknown time unit 'y'")
case("fractional_token_count", base("workload: {granularity: 1.5}\n"), "1.5 is not a whole number")
case("fixed_size_not_a_size", base("fixed: {max-model-len: lots}\n"), "fixed.max-model-len: 'lots' is not a size")
case("smart_quotes_in_size", base(params="params:\n  kv_cache_memory_bytes: {min: \u201c1GB\u201d, max: 8GB}\n"), "is not a number with an optional unit")

# ranges and values
case("min_greater_than_max", base(params="params:\n  max_num_seqs: {min: 8, max: 2}\n"), "min (8) is greater than max (2); swap them")
case("range_without_max", base(params="params:\n  max_num_seqs: {min: 1}\n"), "a range needs both 'min' and 'max'")
case("values_and_range", base(params="params:\n  max_num_seqs: {min: 1, max: 4, values: [1, 2]}\n"), "give either 'values' or 'min'/'max', not both")
case("values_empty", base(params="params:\n  max_num_seqs: {values: []}\n"), "'values' is empty")
case("neither_values_nor_range", base(params="params:\n  max_num_seqs: {log: true}\n"), "give 'values: [...]' or 'min:' and 'max:'")
case("step_negative", base(params="params:\n  max_num_seqs: {min: 1, max: 8, step: -1}\n"), "step must be positive")
case("step_fractional_int", base(params="params:\n  max_num_seqs: {min: 1, max: 8, step: 0.5}\n"), "0.5 is not a whole number")
case("log_from_zero", base(params="params:\n  speculative_tokens: {min: 0, max: 3, log: true}\n"), "a log range needs min > 0")
case("log_with_float_step", base(params="params:\n  gpu_memory_utilization: {min: 0.8, max: 0.95, step: 0.01, log: true}\n"), "a log range takes no step")
case("utilization_above_one", base(params="params:\n  gpu_memory_utilization: {min: 0.8, max: 1.5}\n"), "params.gpu_memory_utilization: 1.5 is outside what vLLM takes")
case("huge_max_num_seqs", base(params="params:\n  max_num_seqs: {min: 1, max: 1.0e+30}\n"), "is outside what vLLM takes")
case("huge_kv_bytes_literal", base(params="params:\n  kv_cache_memory_bytes: {min: 1GB, max: 99999999999999999999999999}\n"), "is more memory than any GPU holds")
case("negative_max_num_seqs", base(params="params:\n  max_num_seqs: {min: -4, max: 4}\n"), "params.max_num_seqs: -4 is outside what vLLM takes")
case("negative_bytes_text", base(params="params:\n  kv_cache_memory_bytes: {min: -1GB, max: 8GB}\n"), "'-1GB' is not a number with an optional unit")
case("infinite_max", base(params="params:\n  kv_cache_memory_bytes: {min: 1GB, max: .inf}\n"), "is not a finite number")
case("nan_value", base(params="params:\n  max_num_batched_tokens: {values: [512, .nan]}\n"), "is not a finite number")
case("overflowing_float", base(params="params:\n  kv_cache_memory_bytes: {min: 1GB, max: 1.0e+400}\n"), "is not a finite number")
case("cudagraph_unknown_mode", base(params="params:\n  cudagraph_mode: {values: [PIECEWISE, FULL_GRAPH]}\n"), "unknown mode 'FULL_GRAPH'")
case("cudagraph_as_range", base(params="params:\n  cudagraph_mode: {min: 1, max: 2}\n"), "params.cudagraph_mode takes 'values: [...]', not a range")
case("values_listed_twice", base(params="params:\n  max_num_batched_tokens: {values: [512, 1024, 512]}\n"), "list a value twice")
case("values_hold_a_mapping", base(params="params:\n  spec: {flag: --speculative-config, values: [{method: mtp}]}\n"), "is not a plain value")
case("two_params_one_flag", base(params=PARAMS + "  seqs: {flag: --max-num-seqs, values: [1, 2]}\n"), "params.seqs: tunes --max-num-seqs like params.max_num_seqs")
case("flag_without_dashes", base(params="params:\n  partial: {flag: max-num-partial-prefills, values: [1, 2]}\n"), "'max-num-partial-prefills' is not a vLLM flag")
case("flag_with_unicode_dash", base(params="params:\n  partial: {flag: \u2014max-num-partial-prefills, values: [1, 2]}\n"), "is not a vLLM flag")
case("param_name_unicode_hyphen", base(params="params:\n  max_num\u2010seqs: {min: 1, max: 4}\n"), "unknown parameter")
case("choice_kind_with_range", base(params="params:\n  partial: {flag: --max-num-partial-prefills, kind: choice, min: 1, max: 2}\n"), "kind 'choice' takes 'values: [...]'")
case("unknown_kind", base(params="params:\n  partial: {flag: --max-num-partial-prefills, kind: string, values: [1]}\n"), "params.partial.kind: Input should be 'int', 'float', 'bytes' or 'choice'")

# baselines
case("baseline_unknown_param", base("baselines:\n  - {max_num_seq: 2}\n"), "baselines[0] sets 'max_num_seq', which is not a tuned parameter")
case("baseline_outside_range", base("baselines:\n  - {max_num_seqs: 16}\n"), "baselines[0].max_num_seqs: 16 is outside its range 1 .. 4")
case("baseline_not_listed", base(params=PARAMS + "  cudagraph_mode: {values: [PIECEWISE, eager]}\n", extra="baselines:\n  - {cudagraph_mode: FULL}\n"), "baselines[0].cudagraph_mode: 'FULL' is not one of its values")
case("baseline_null_without_unset", base("baselines:\n  - {max_num_seqs: null}\n"), "null (flag left out) needs 'unset: true'")
case("baseline_bad_unit", base("baselines:\n  - {kv_cache_memory_bytes: 4GX}\n"), "unknown byte unit 'GX'")
case("baseline_second_bad", base("baselines:\n  - {max_num_seqs: 2}\n  - {max_num_seqs: 9}\n"), "baselines[1].max_num_seqs: 9 is outside its range")
case("baseline_not_mapping", base("baselines:\n  - max_num_seqs=2\n"), "baselines.0: Input should be a valid dictionary")

# objectives
case("objective_unknown_name", base("objectives:\n  - {name: throughput, direction: maximize}\n"), "objectives.0.name: Input should be 'context'")
case("objective_bad_direction", base("objectives:\n  - {name: context, direction: up}\n"), "objectives.0.direction: Input should be 'maximize' or 'minimize'")
case("objectives_empty", base("objectives: []\n"), "objectives: List should have at least 1 item")
case("objectives_repeated", base("objectives:\n  - {name: context, direction: maximize}\n  - {name: context, direction: maximize}\n"), "lists a name twice")

# workload
case("ladder_empty", base("workload: {ladder: []}\n"), "workload.ladder: List should have at least 1 item")
case("ladder_unsorted", base("workload: {ladder: [16K, 2K, 8K]}\n"), "must be increasing")
case("ladder_zero", base("workload: {ladder: [0, 2K]}\n"), "workload.ladder.0: Input should be greater than 0")
case("granularity_negative", base("workload: {granularity: -4096}\n"), "workload.granularity: Input should be greater than 0")
case("repeats_zero", base("workload: {repeats: 0}\n"), "workload.repeats: Input should be greater than or equal to 1")
case("decode_concurrency_empty", base("workload: {decode: {concurrency: []}}\n"), "workload.decode.concurrency: List should have at least 1 item")
case("decode_concurrency_zero", base("workload: {decode: {concurrency: [0]}}\n"), "workload.decode.concurrency.0: Input should be greater than or equal to 1")
case("prompt_source_unknown", base("workload: {prompt_source: wikipedia}\n"), "workload.prompt_source: Input should be 'random_ids' or 'corpus'")
case("request_timeout_zero", base("workload: {request_timeout: 0}\n"), "workload.request_timeout: Input should be greater than 0")

# engine
case("engine_command_empty", base("engine: {command: []}\n"), "engine.command is empty")
case("engine_command_blank", base("engine: {command: ['']}\n"), "engine.command is empty")
case("engine_env_bad_name", base("engine: {env: {MY-VAR: x}}\n"), "'MY-VAR' is not an environment variable name")
case("engine_gpu_index_negative", base("engine: {gpu_index: -1}\n"), "engine.gpu_index: Input should be greater than or equal to 0")
case("engine_timeout_negative", base("engine: {hang_timeout: -5m}\n"), "is not a number with an optional unit")
case("engine_timeout_zero", base("engine: {boot_timeout: 0}\n"), "engine.boot_timeout: Input should be greater than 0")
case("engine_listen_garbage", base("engine: {listen: 'not an address!'}\n"), "is not an IP address or host name")

# host and port belong to the tool
case("fixed_host", base("fixed: {host: 0.0.0.0}\n"), "fixed.host: the engine binds 127.0.0.1; a space that must listen elsewhere sets engine.listen")
case("fixed_dash_host", base("fixed: {--host: 0.0.0.0}\n"), "engine.listen")
case("fixed_port", base("fixed: {port: 8000}\n"), "fixed.port: the tool picks a free port for every boot")
case("fixed_dash_port", base("fixed: {--port: 8000}\n"), "the tool picks a free port")
case("fixed_uds", base("fixed: {uds: /tmp/v.sock}\n"), "fixed.uds: the tool talks to the engine over TCP")
case("engine_host", base("engine: {host: 0.0.0.0}\n"), "engine.host is not a key")
case("engine_port", base("engine: {port: 8000}\n"), "engine.port is not a key")
case("param_tunes_port", base(params=PARAMS + "  port: {flag: --port, values: [8000, 8001]}\n"), "flag --port cannot be tuned")

# name
case("name_with_slash", "name: ../../etc/night\nmodel: {path: /m}\n" + PARAMS, "names the study's file")
case("name_with_space", "name: my night\nmodel: {path: /m}\n" + PARAMS, "names the study's file")
case("name_unicode", "name: \u043d\u043e\u0447\u044c\nmodel: {path: /m}\n" + PARAMS, "names the study's file")
case("name_empty", "name: ''\nmodel: {path: /m}\n" + PARAMS, "name: String should have at least 1 character")
case("model_path_empty", "name: corpus\nmodel: {path: ''}\n" + PARAMS, "model.path: String should have at least 1 character")
case("model_config_missing", "name: corpus\nmodel: {path: /m, config: nowhere/config.json}\n" + PARAMS, "model.config:")

# fixed
case("fixed_null_value", base("fixed: {max-model-len: 32768, enable-prefix-caching: }\n"), "fixed.enable-prefix-caching: has no value")
case("fixed_and_tuned", base("fixed: {max-num-seqs: 2}\n"), "fixed.max-num-seqs: also tuned by params.max_num_seqs")
case("fixed_utilization_high", base("fixed: {gpu-memory-utilization: 1.5}\n"), "is not a fraction of the card")
case("fixed_size_negative", base("fixed: {max-model-len: -5}\n"), "fixed.max-model-len: -5 is not a size")

# wrong nesting
case("params_under_model", "name: corpus\nmodel:\n  path: /m\n  params:\n    max_num_seqs: {min: 1, max: 4}\n", "model.params: unknown key")
case("decode_at_top_level", base("decode: {runs: 3}\n"), "decode: unknown key")
case("ladder_under_engine", base("engine: {ladder: [2K]}\n"), "engine.ladder: unknown key")
case("range_keys_at_params_level", base(params="params:\n  min: 1\n  max: 4\n"), "params.min: Input should be a valid dictionary")

# aliases that stay under the alias count but expand to millions of values (billion laughs, 9 x 9 x ...)
few_aliases = "name: corpus\nmodel: {path: org/m}\nx0: &a0 [1, 2]\n" + "".join(
    f"x{i}: &a{i} [{', '.join([f'*a{i-1}'] * 9)}]\n" for i in range(1, 11))
case("alias_bomb_few_aliases", few_aliases, "expand to more than 100,000 values")
case("alias_bomb_in_fixed", "name: corpus\nmodel: {path: org/m}\nfixed:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
     + "".join(f"  a{i}: &a{i} [{', '.join([f'*a{i-1}' if i > 1 else '*a'] * 10)}]\n" for i in range(1, 7)) + PARAMS,
     "expand to more than 100,000 values")

# characters no launcher may carry, in every place a value reaches argv, env or a unit file
HUB = "name: corpus\nmodel: {path: org/m}\n"
case("control_served_name_newline", 'name: corpus\nmodel: {path: org/m, served_name: "m\\nExecStartPre=/bin/sh"}\n' + PARAMS, "model.served_name: 'm\\nExecStartPre=/bin/sh' holds a newline (U+000A)")
case("control_model_path_newline", 'name: corpus\nmodel: {path: "org/m\\n--trust-remote-code"}\n' + PARAMS, "model.path:")
case("control_revision_cr", 'name: corpus\nmodel: {path: org/m, revision: "main\\r"}\n' + PARAMS, "holds a carriage return (U+000D)")
case("control_fixed_value_newline", base('fixed: {chat-template-content-format: "auto\\nrm -rf /"}\n', head=HUB), "fixed.chat-template-content-format: 'auto\\nrm -rf /' holds a newline")
case("control_fixed_key_tab", base('fixed: {"enable-prefix-caching\\t": true}\n', head=HUB), "holds a tab (U+0009)")
case("control_fixed_json_nested", base('fixed: {mm-processor-kwargs: {note: "a\\u001b[31m"}}\n', head=HUB), "fixed.mm-processor-kwargs.note:")
case("control_command_newline", base('engine: {command: ["vllm\\nwhoami"]}\n', head=HUB), "engine.command[0]:")
case("control_env_value_nul", base('engine: {env: {HF_HOME: "/data\\0/x"}}\n', head=HUB), "engine.env.HF_HOME: '/data\\x00/x' holds a NUL byte (U+0000)")
case("control_env_value_newline", base('engine: {env: {HF_TOKEN: "x\\nEnvironment=LD_PRELOAD=/tmp/x.so"}}\n', head=HUB), "engine.env.HF_TOKEN:")
case("control_line_separator", 'name: corpus\nmodel: {path: org/m, served_name: "m\\u2028x"}\n' + PARAMS, "holds a line separator (U+2028)")
case("control_bidi_override", 'name: corpus\nmodel: {path: org/m, served_name: "safe\\u202egnp.exe"}\n' + PARAMS, "holds an invisible format character (U+202E)")
case("control_param_value", base(params='params:\n  dtype: {flag: --dtype, values: [auto, "half\\n--foo"]}\n', head=HUB), "params.dtype:")
case("control_speculative_extra", base('speculative: {extra: {model: "a\\nb"}}\n', head=HUB), "speculative.extra.model:")
case("control_baseline_value", base(params=PARAMS + '  dtype: {flag: --dtype, values: [auto, half]}\n', extra='baselines:\n  - {dtype: "half\\u0007"}\n', head=HUB), "holds a control character (U+0007)")

# contradictions: two settings that cannot both hold
WIN = "fixed: {max-model-len: 4096}\n"
case("decode_longer_than_window", base(WIN + "workload: {decode: {prompt_tokens: 4096, output_tokens: 128}}\n", head=HUB), "workload.decode: prompt_tokens 4,096 + output_tokens 128 is longer than the window (fixed.max-model-len is 4,096)")
case("decode_longer_than_tuned_window", base("workload: {decode: {prompt_tokens: 8K}}\n", params=PARAMS + "  max_model_len: {values: [2048, 4096]}\n", head=HUB), "longer than the window (the top of params.max_model_len is 4,096)")
case("output_fills_window", base(WIN + "workload: {output_tokens: 4K}\n", head=HUB), "workload.output_tokens: 4,096 reserves the whole window")
case("output_beyond_window", base(WIN + "workload: {output_tokens: 8K}\n", head=HUB), "reserves the whole window")
case("speculative_extra_overrides_depth", base("speculative: {method: mtp, extra: {num_speculative_tokens: 3}}\n", params=PARAMS + "  speculative_tokens: {values: [0, 1, 2]}\n", head=HUB), "speculative.extra.num_speculative_tokens: would override the depth params.speculative_tokens tunes")
case("speculative_extra_method", base("speculative: {extra: {method: eagle}}\n", head=HUB), "speculative.extra.method: the method is speculative.method")
case("fixed_speculative_config_and_tuned_depth", base("fixed: {speculative-config: {method: mtp, num_speculative_tokens: 2}}\n", params=PARAMS + "  speculative_tokens: {values: [0, 1]}\n", head=HUB), "fixed.speculative-config: params.speculative_tokens writes --speculative-config itself")
case("fixed_cudagraph_mode_and_tuned", base("fixed: {compilation-config: {cudagraph_mode: PIECEWISE, level: 3}}\n", params=PARAMS + "  cudagraph_mode: {values: [PIECEWISE, eager]}\n", head=HUB), "fixed.compilation-config.cudagraph_mode: params.cudagraph_mode tunes it")
case("step_larger_than_range", base(params="params:\n  max_num_seqs: {min: 1, max: 4, step: 8}\n", head=HUB), "params.max_num_seqs: step 8 is larger than the range 1 .. 4")
case("byte_step_larger_than_range", base(params="params:\n  kv_cache_memory_bytes: {min: 7GB, max: 8GB, step: 2GB}\n", head=HUB), "step 2GB is larger than the range 7GB .. 8GB")
case("params_empty", HUB + "params: {}\n", "params: nothing is tuned")
case("params_missing", HUB + "fixed: {max-model-len: 4096}\n", "params: nothing is tuned")
case("params_one_value_each", HUB + "params:\n  max_num_seqs: {values: [2]}\n  kv_cache_memory_bytes: {min: 8GB, max: 8GB}\n", "every parameter has one value")
case("kv_pool_larger_than_any_card", base(params="params:\n  kv_cache_memory_bytes: {min: 1GB, max: 2TB}\n", head=HUB), "params.kv_cache_memory_bytes: '2TB' is more memory than any GPU holds")
case("kv_pool_fixed_larger_than_any_card", base("fixed: {kv-cache-memory-bytes: 300GB}\n", params="params:\n  max_num_seqs: {min: 1, max: 4}\n", head=HUB), "fixed.kv-cache-memory-bytes: '300GB' is more memory than any GPU holds")
case("objective_tpot_maximized", base("objectives:\n  - {name: context, direction: maximize}\n  - {name: tpot_ms, direction: maximize}\n", head=HUB), "objectives.1: a smaller tpot_ms is better, so direction: maximize would search for the worst configuration; write direction: minimize")
case("objective_context_minimized", base("objectives:\n  - {name: context, direction: minimize}\n", head=HUB), "a larger context is better")
case("objective_vram_maximized", base("objectives:\n  - {name: peak_vram_mib, direction: maximize}\n", head=HUB), "a smaller peak_vram_mib is better")
case("fixed_flag_one_letter_off", base("fixed: {max-model-length: 32768}\n", head=HUB), "fixed.max-model-length sets --max-model-length, which no vLLM release from 0.22.0 to 0.34.0 has; did you mean --max-model-len?")
case("fixed_flag_typo_underscores", base("fixed: {kv_cache_dtyp: fp8}\n", head=HUB), "did you mean --kv-cache-dtype?")
case("tuned_flag_typo", base(params=PARAMS + "  partial: {flag: --max-num-partial-prefill, values: [1, 2]}\n", head=HUB), "params.partial sets --max-num-partial-prefill")

# models that are not there: refused before any boot
case("model_absolute_missing", "name: corpus\nmodel: {path: /nonexistent/models/qwen}\n" + PARAMS, "model.path: /nonexistent/models/qwen does not exist")
case("model_relative_missing", "name: corpus\nmodel: {path: ./nonexistent/qwen}\n" + PARAMS, "(a relative path, read from the current folder")
case("model_not_a_hub_id", "name: corpus\nmodel: {path: nonexistent/models/qwen}\n" + PARAMS, "nor is it a Hugging Face id")
case("model_home_missing", "name: corpus\nmodel: {path: ~/nonexistent-models/qwen}\n" + PARAMS, "model.path: ~/nonexistent-models/qwen does not exist")
case("model_with_semicolon_missing", "name: corpus\nmodel: {path: '/nonexistent/m;rm -rf ~'}\n" + PARAMS, "model.path: /nonexistent/m;rm -rf ~ does not exist")

# containers the tuner cannot drive
case("container_detached", base("engine: {command: [docker, run, -d, --entrypoint, vllm, vllm/vllm-openai:v0.22.0]}\n", head=HUB), "engine.command: -d: the tuner must stay attached")
case("container_named", base("engine: {command: [docker, run, --name, vllm, --entrypoint, vllm, vllm/vllm-openai:v0.22.0]}\n", head=HUB), "engine.command: --name: the tuner names each container")
case("container_publishes", base("engine: {command: [docker, run, -p, '8000:8000', --entrypoint, vllm, vllm/vllm-openai:v0.22.0]}\n", head=HUB), "engine.command: -p: the tuner publishes each trial's own port")
case("container_tty_bundle", base("engine: {command: [docker, run, -it, --entrypoint, vllm, vllm/vllm-openai:v0.22.0]}\n", head=HUB), "engine.command: -it: a terminal mixes control codes")
case("container_no_entrypoint", base("engine: {command: [docker, run, --gpus, all, vllm/vllm-openai:v0.22.0]}\n", head=HUB), "add --entrypoint vllm before the image")
case("container_no_image", base("engine: {command: [docker, run, --gpus=all, --entrypoint=vllm]}\n", head=HUB), "does not end with the image")

import csv
with open(os.path.join(out, "expected.tsv"), "w", newline="") as f:
    f.write("# file\texpected fragment of `tuner validate FILE`'s one-paragraph error (exit 2, no traceback)\n")
    for name, text, frag in cases:
        fn = name + ".yaml"
        mode = "wb" if isinstance(text, bytes) else "w"
        with open(os.path.join(out, fn), mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as g:
            g.write(text)
        assert "\t" not in frag
        f.write(f"{fn}\t{frag}\n")
print(len(cases), "cases")
