# The two front-door commands (README): `make demo` and `make test`.
# Both install the Debian packages first (scripts/install-deps.sh, idempotent).
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= 2

.PHONY: deps build python bench-python demo test test-asan test-tsan fuzz bench bench-mpi bench-sim bench-peers format clean

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

demo: build
	$(BUILD)/hsgd train --config examples/demo.toml

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

# The parallel simulator's figures (BENCHMARKS.md: issue #12).
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

clean:
	rm -rf build
