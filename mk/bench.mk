# NumPy attention against PyTorch on this machine (bench/run.py; see its docstring).
# Included by the top-level Makefile, which defines PY and `env`.
#
#   make bench         full run (~5 min): prints the table, writes bench/results/latest.{md,json,png}
#                      and copies the table and the targets into README.md (between its markers)
#   make bench-quick   smoke run (small shapes, a few seconds per row), writes nothing

.PHONY: bench bench-quick

bench: env ## benchmark NumPy attention against PyTorch; table + plot in bench/results/
	$(PY) bench/run.py

bench-quick: env ## quick smoke run of the benchmark (small shapes)
	$(PY) bench/run.py --quick

.PHONY: bench-llm
bench-llm: env ## SmolLM2-135M per-token latency and prefill, NumPy vs PyTorch (bench/llm_speed.py)
	$(PY) bench/llm_speed.py
