# The two front-door commands (README): `make demo` and `make test`; `make docs`.
# Both install the Debian packages first (scripts/install-deps.sh, idempotent).
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= 2

.PHONY: deps build python bench-python demo docs figures test test-asan test-tsan fuzz bench bench-mpi bench-sim bench-peers cluster format format-check clean

deps:
	bash scripts/install-deps.sh

build: deps
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS)

# The Python module (import hsgd) installed into a venv at $(VENV), made with
# Debian's /usr/bin/python3 and --system-site-packages (docs/python.md).
VENV ?= build/venv
python: deps
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS) --target _hsgd hsgd
	bash scripts/install-python.sh $(BUILD) $(VENV)

# The Python module's figures (BENCHMARKS.md, "Python"): overhead against the
# CLI, and peak RSS on a 1 GB array against the same data from files.
bench-python: python
	PYTHONPATH=$(BUILD)/python /usr/bin/python3 bench/python/figures.py --hsgd $(BUILD)/hsgd

# The demo builds only the hsgd binary (not the tests and fuzz harnesses,
# which `make test` builds), so training starts as soon as the packages are in.
demo: deps
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS) --target hsgd
	$(BUILD)/hsgd train --config examples/demo.toml
	@echo
	@echo "Next: compare policies on the simulator: $(BUILD)/hsgd compare --config examples/paper/synthetic.toml --policies sync,async,hybrid --out runs/compare"
	@echo "      open the plot of this run: runs/demo/plot.png (and runs/compare/compare.png after the comparison)"
	@echo "      Python: examples/python/ and docs/python.md; your own model: docs/your-model-and-data.md"

# The documentation site (mkdocs.yml) into build/site/, --strict: a broken
# link or a missing page fails. `make test` builds it too (CTest docs_mkdocs_strict).
docs: deps
	mkdocs build --strict --site-dir build/site

# The results pages' figures (docs/img/results-*.png) from committed data.
figures:
	bash scripts/docs-figures.sh

test: build
	ctest --preset $(PRESET) -j $(JOBS)

test-asan: deps
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

# libFuzzer on every reader, FUZZ_SECONDS each (docs/fuzzing.md). Installs
# clang and libFuzzer (scripts/install-fuzz-deps.sh) only here.
FUZZ_SECONDS ?= 60
FUZZ_TIMEOUT ?= 1
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TIMEOUT=$(FUZZ_TIMEOUT) JOBS=$(JOBS) bash scripts/fuzz.sh

test-tsan: deps
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j 1

bench: build
	$(BUILD)/hsgd bench

# The mpi runtime's figures: 3 ranks (1 server, 2 workers) on this machine, over
# shared memory, then over TCP only (across two network namespaces instead:
# scripts/mpi-netns.sh -- -np 3 $(BUILD)/hsgd bench --mpi).
bench-mpi: build
	mpirun --allow-run-as-root --oversubscribe -np 3 $(BUILD)/hsgd bench --mpi --seconds 3 --repeats 5
	mpirun --allow-run-as-root --oversubscribe -np 3 --mca btl tcp,self $(BUILD)/hsgd bench --mpi --seconds 3 --repeats 5

# An emulated cluster on this machine (scripts/mpi-netns.sh, needs root):
# CLUSTER_HOSTS network namespaces behind a bridge, one rank per host, every
# link rate-limited to CLUSTER_RATE both ways (the server's to
# CLUSTER_SERVER_RATE), running CLUSTER_CONFIG on the mpi runtime with one
# server and CLUSTER_HOSTS - 1 workers.
CLUSTER_HOSTS ?= 4
CLUSTER_RATE ?= 100mbit
CLUSTER_SERVER_RATE ?= $(CLUSTER_RATE)
CLUSTER_CONFIG ?= examples/demo.toml
CLUSTER_OUT ?= runs/cluster
cluster: build
	bash scripts/mpi-netns.sh -n $(CLUSTER_HOSTS) -r $(CLUSTER_RATE) -R $(CLUSTER_SERVER_RATE) -- \
	  -np $(CLUSTER_HOSTS) $(BUILD)/hsgd train --config $(CLUSTER_CONFIG) --runtime mpi --servers 1 \
	  --out $(CLUSTER_OUT)

# The parallel simulator's figures (docs/benchmarks.md).
bench-sim: build
	$(BUILD)/hsgd bench --sim --seconds 3 --repeats 3

# hsgd against PyTorch single-process, DDP (gloo) and Hogwild on LeNet-5
# (bench/peers/peers.py). Optional: installs Debian's python3-torch if missing.
PEERS_SECONDS ?= 20
PEERS_ROUNDS ?= 1
bench-peers: build
	bash scripts/apt-ensure.sh bench-peers python3-torch python3-numpy
	/usr/bin/python3 bench/peers/peers.py --hsgd $(BUILD)/hsgd --seconds $(PEERS_SECONDS) \
	  --rounds $(PEERS_ROUNDS)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

# Fails (naming the file and line) where a source file is not as
# clang-format (.clang-format) writes it; CI runs it first.
format-check:
	bash scripts/apt-ensure.sh format-check clang-format
	clang-format --dry-run -Werror $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build
