/* The gossip exchange without hsgd: every step, each rank sends N floats to
 * one peer and receives N from another (Isend/Irecv, then Waitall), in
 * messages of at most CHUNK floats. PATTERN: "onepeer" (4 ranks: peers at
 * distance 1, then 2, alternating; 2 ranks: each other), "ring" (distance
 * 1 always), "oneway" (rank 0 to rank 1 only, a barrier per step).
 * Prints the median step time of rank 0, in ms.
 * Usage: mpi_exchange N STEPS PATTERN [CHUNK]   (scripts/mpi-exchange.sh) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc < 4 || n < 2) {
    if (r == 0) fprintf(stderr, "usage: mpi_exchange N STEPS PATTERN [CHUNK] (2+ ranks)\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int np = atoi(argv[1]), steps = atoi(argv[2]);
  const char* pattern = argv[3];
  const int chunk = argc > 4 ? atoi(argv[4]) : np;
  const int oneway = strcmp(pattern, "oneway") == 0, ring = strcmp(pattern, "ring") == 0;
  const int nc = (np + chunk - 1) / chunk;
  float* a = calloc((size_t)np, sizeof(float));
  float* b = calloc((size_t)np, sizeof(float));
  MPI_Request* q = malloc(sizeof(MPI_Request) * 2 * (size_t)nc);
  double* t = malloc(sizeof(double) * (size_t)steps);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int s = 0; s < steps; ++s) {
    const double t0 = MPI_Wtime();
    const int k = n == 2 || ring ? 1 : 1 << (s % 2);
    const int to = (r + k) % n, from = (r - k + n) % n;
    for (int c = 0; c < 2 * nc; ++c) q[c] = MPI_REQUEST_NULL;
    for (int c = 0; c < nc; ++c) {
      const int off = c * chunk, len = np - off < chunk ? np - off : chunk;
      if (!oneway || r == 1) MPI_Irecv(b + off, len, MPI_FLOAT, from, c, MPI_COMM_WORLD, &q[c]);
      if (!oneway || r == 0) MPI_Isend(a + off, len, MPI_FLOAT, to, c, MPI_COMM_WORLD, &q[nc + c]);
    }
    MPI_Waitall(2 * nc, q, MPI_STATUSES_IGNORE);
    if (oneway) MPI_Barrier(MPI_COMM_WORLD);
    t[s] = MPI_Wtime() - t0;
  }
  if (r == 0) {
    qsort(t, (size_t)steps, sizeof(double), cmp);
    printf("%s, %d ranks, %d floats in chunks of %d: %.1f ms per step (median of %d)\n", pattern,
           n, np, chunk, 1e3 * t[steps / 2], steps);
  }
  free(a);
  free(b);
  free(q);
  free(t);
  MPI_Finalize();
  return 0;
}
