# Speed against PyTorch on this machine; bench/README.md shows the latest results.
# Included by the top-level Makefile, which defines PY and `env`.
#
#   make bench         everything below, one after the other (~40 min)
#   make bench-attention  attention cores, multi-head attention, GEMM, memory (bench/run.py, ~5 min):
#                      writes bench/results/latest.{md,json,png} and the table in bench/README.md
#   make bench-llm     SmolLM2-135M decoding against the memory-bandwidth bound, 1 and 2 threads:
#                      the bound (GEMV, plain read), FastLlama, the readable Llama, transformers
#                      (loop, generate), llama.cpp if llama-cpp-python is installed, and both NumPy
#                      decoders with and without speculative decoding on grounded and free prompts, tokens
#                      compared in float32 and float64 (bench/llm_speed.py, bench/llm_speculation.py,
#                      ~20 min): bench/results/llm_speed.{txt,json,md,png} and the table in bench/README.md
#   make bench-llamacpp  builds the optional llama-cpp-python (requirements/bench.txt; ~5 min) for bench-llm
#   make bench-train   one training step of notebook 10's model (bench/train_step_speed.py, ~2 min):
#                      bench/results/train_step.txt
#   make bench-lora    one LoRA fine-tuning step of notebook 11 (SmolLM2-135M), NumPy vs PyTorch eager,
#                      default threads and one (bench/lora_step_speed.py, ~10 min): bench/results/lora_step.txt
#   make bench-tokens  the course's tokenizers (notebook 12) against the tokenizers library on 1 MB of text, one
#                      thread (bench/tokenizer_speed.py, ~1 min): bench/results/tokenizer_speed.txt
#   make bench-quick   smoke run of bench/run.py (small shapes, a few seconds per row), writes nothing

.PHONY: bench bench-attention bench-llm bench-llamacpp bench-train bench-lora bench-tokens bench-quick

bench: bench-attention bench-llm bench-train bench-lora bench-tokens ## all speed measurements against PyTorch; results in bench/results/, summary in bench/README.md

bench-attention: env ## attention and multi-head attention against PyTorch; table + plot in bench/results/
	$(PY) bench/run.py

bench-llm: test-env bench-llamacpp ## SmolLM2-135M decoding: share of the memory-bandwidth bound, beside transformers and llama.cpp
	$(PY) bench/llm_speed.py

# llama.cpp (llama-cpp-python) has no wheel on the registry: a source build with cmake and gcc (~5 min on
# 2 cores). Optional: when the build fails, bench-llm runs without the llama.cpp rows and says so.
bench-llamacpp: test-env ## optional: build llama-cpp-python (requirements/bench.txt) for bench-llm's llama.cpp rows
	@$(PY) -c "import llama_cpp, diskcache" 2>/dev/null \
		|| CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PIP) install -r requirements/bench.txt \
		|| echo "bench-llamacpp: llama-cpp-python did not build; bench-llm runs without llama.cpp rows"

bench-train: env ## one training step of notebook 10's model, NumPy vs PyTorch (bench/train_step_speed.py)
	$(PY) bench/train_step_speed.py > bench/results/train_step.txt.tmp && mv bench/results/train_step.txt.tmp bench/results/train_step.txt
	$(PY) bench/readme_block.py train bench/results/train_step.txt
	cat bench/results/train_step.txt

bench-lora: test-env ## one LoRA step of notebook 11 on SmolLM2-135M, NumPy vs PyTorch eager (bench/lora_step_speed.py)
	$(PY) bench/lora_step_speed.py > bench/results/lora_step.txt.tmp && mv bench/results/lora_step.txt.tmp bench/results/lora_step.txt
	$(PY) bench/readme_block.py lora bench/results/lora_step.txt
	cat bench/results/lora_step.txt

bench-tokens: test-env ## the course's BPE and WordPiece against the tokenizers library, 1 MB, one thread (bench/tokenizer_speed.py)
	$(PY) bench/tokenizer_speed.py > bench/results/tokenizer_speed.txt.tmp && mv bench/results/tokenizer_speed.txt.tmp bench/results/tokenizer_speed.txt
	$(PY) bench/readme_block.py tokens bench/results/tokenizer_speed.txt
	cat bench/results/tokenizer_speed.txt

bench-quick: env ## quick smoke run of the benchmark (small shapes)
	$(PY) bench/run.py --quick
