// SPDX-License-Identifier: GPL-2.0
/*
 * nvsim-memory.c -- the libcuda stand-in's nvsim mode.
 *
 * PEERMEM_CUDA_STANDIN_MEMORY=nvsim: cuMemAlloc memory is the simulated
 * NVIDIA driver's instead (tests/sim, /dev/nvidia_p2p_sim), allocated for
 * the calling process, whose RM client is this library's open file of that
 * device: nvidia_p2p_get_pages pins exactly this memory, and cuMemFree is
 * the simulated cudaFree with its free callbacks.  The process has no CPU
 * mapping of it, as of real cuMemAlloc memory: its VA range is reserved
 * PROT_NONE (as CUDA reserves its unified address space), so
 * get_user_pages refuses it, and cuMemcpy goes through the driver
 * (NVSIM_IOC_MEMCPY).  The allocation's layout in GPU memory is
 * PEERMEM_CUDA_STANDIN_LAYOUT (contiguous, fragmented:N, shuffled; default
 * fragmented:2), and PEERMEM_CUDA_STANDIN_OFFSET bytes (below 64 KiB)
 * into the allocation is the pointer returned, as a caching allocator
 * hands out a block inside a larger one: a buffer that does not start on a
 * GPU page.  Without a GPU mapping there is no dma-buf export or VMM
 * (cuMemCreate) in this mode: their attributes read 0.
 *
 * Three more knobs of the nvsim mode let a test check what a program it
 * cannot change (perftest) moved through GPU memory, by the driver's own
 * path (cuMemcpy by VA) and never through a scatterlist:
 *   PEERMEM_CUDA_STANDIN_FILL=SEED     cuMemAlloc fills the buffer with the
 *                                      pattern of SEED (real cuMemAlloc
 *                                      memory holds anything);
 *   PEERMEM_CUDA_STANDIN_EXPECT=OFF:LEN:SEED:SRC[,...]
 *                                      cuMemFree first reads the buffer and
 *                                      prints one line on stderr,
 *                                      "cuda-standin: check ...: ok" or the
 *                                      wrong bytes: byte OFF + i (i < LEN)
 *                                      holds byte SRC + i of SEED's pattern
 *                                      (what another buffer filled with SEED
 *                                      had at SRC + i), the rest FILL's;
 *                                      SEED x: the range was overwritten
 *                                      with data of no known pattern (host
 *                                      memory perftest filled at random): at
 *                                      most 1/64 of its bytes may still hold
 *                                      FILL's (1/256 by chance);
 *   PEERMEM_CUDA_STANDIN_FREE_AFTER_MS=N  a thread frees each allocation N ms
 *                                      after cuMemAlloc (an application
 *                                      thread's cudaFree under traffic);
 *                                      the program's own cuMemFree then
 *                                      finds nothing.
 * A pattern is a function of the byte's offset in the buffer (from the
 * pointer cuMemAlloc returned) and the seed: two processes' buffers at
 * other VAs compare equal where the same bytes landed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_uapi.h"
#include "standin.h"

int nvsim = -1;

/* nvsim mode: one allocation of the simulated driver's GPU memory. */
struct gpu_alloc {
	CUdeviceptr ptr;	/* what cuMemAlloc returned (va + offset) */
	CUdeviceptr va;		/* the driver's allocation */
	size_t size;		/* its length (64 KiB pages) */
	void *resv;		/* the PROT_NONE reservation of its VA range */
	size_t resv_len;
	int used;
};
#define GPU_PAGE (64UL << 10)
static struct gpu_alloc gpu_allocs[MAX_ALLOCS];
/* The table's lock: PEERMEM_CUDA_STANDIN_FREE_AFTER_MS frees from a thread. */
static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;

static struct gpu_alloc *gpu_alloc_at(CUdeviceptr p)
{
	for (int i = 0; i < MAX_ALLOCS; i++)
		if (gpu_allocs[i].used && p >= gpu_allocs[i].va &&
		    p < gpu_allocs[i].va + gpu_allocs[i].size)
			return &gpu_allocs[i];
	return NULL;
}

int gpu_owns(CUdeviceptr p)
{
	return gpu_range(p, 1);
}

int gpu_range(CUdeviceptr p, size_t n)
{
	struct gpu_alloc *a;
	int in;

	pthread_mutex_lock(&gpu_lock);
	a = gpu_alloc_at(p);
	in = a && n <= a->va + a->size - p;
	pthread_mutex_unlock(&gpu_lock);
	return in;
}

/* A copy through the driver (NVSIM_IOC_MEMCPY), of a range it checks. */
static CUresult gpu_copy_raw(CUdeviceptr va, void *buf, size_t n, unsigned int dir)
{
	struct nvsim_memcpy m = { .va = va, .buf = (uintptr_t)buf, .len = n, .dir = dir };

	if (ioctl(nvsim, NVSIM_IOC_MEMCPY, &m)) {
		say("cuMemcpy of %zu bytes at 0x%llx: %s", n, va, strerror(errno));
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult gpu_copy(CUdeviceptr va, void *buf, size_t n, int htod)
{
	if (!n)
		return CUDA_SUCCESS;
	if (!gpu_range(va, n))
		return CUDA_ERROR_INVALID_VALUE;
	return gpu_copy_raw(va, buf, n, htod ? NVSIM_MEMCPY_HTOD : NVSIM_MEMCPY_DTOH);
}

/* The layout of new allocations (PEERMEM_CUDA_STANDIN_LAYOUT). */
static int gpu_layout(struct nvsim_alloc *a)
{
	const char *l = getenv("PEERMEM_CUDA_STANDIN_LAYOUT");
	char *end;

	a->layout = NVSIM_LAYOUT_FRAGMENTED;
	a->run_pages = 2;
	if (!l || !*l)
		return 0;
	if (!strcmp(l, "contiguous")) {
		a->layout = NVSIM_LAYOUT_CONTIGUOUS;
		a->run_pages = 0;
	} else if (!strcmp(l, "shuffled")) {
		a->layout = NVSIM_LAYOUT_SHUFFLED;
		a->run_pages = 0;
	} else if (!strncmp(l, "fragmented:", 11)) {
		a->run_pages = strtoul(l + 11, &end, 0);
		if (*end || !a->run_pages)
			goto bad;
	} else {
		goto bad;
	}
	return 0;
bad:
	say("PEERMEM_CUDA_STANDIN_LAYOUT=%s: not contiguous, fragmented:N or shuffled", l);
	return -1;
}

/* Byte `off` of seed `seed`'s pattern: one mixed 64-bit word per 8 bytes. */
static unsigned char pattern(uint64_t off, uint64_t seed)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ULL + (seed + 1) * 0xd1b54a32d192ed03ULL;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 32;
	return (unsigned char)(x >> ((off & 7) * 8));
}

#define CHUNK (1UL << 20)

static uint64_t env_seed(const char *name, int *set)
{
	const char *v = getenv(name);

	*set = v && *v;
	return *set ? strtoull(v, NULL, 0) : 0;
}

/* Fills [p, +n) with the pattern of `seed` through the driver. */
static CUresult gpu_fill(CUdeviceptr p, size_t n, uint64_t seed)
{
	unsigned char *b = malloc(CHUNK);
	CUresult r = CUDA_SUCCESS;

	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t done = 0; done < n && !r; done += CHUNK) {
		size_t k = n - done < CHUNK ? n - done : CHUNK;

		for (size_t i = 0; i < k; i++)
			b[i] = pattern(done + i, seed);
		r = gpu_copy(p + done, b, k, 1);
	}
	free(b);
	return r;
}

/* A range of PEERMEM_CUDA_STANDIN_EXPECT. */
struct expect {
	uint64_t off, len, seed, src;
};
#define CHANGED UINT64_MAX	/* SEED x */
#define MAX_EXPECT 8

/* Parses PEERMEM_CUDA_STANDIN_EXPECT; the number of ranges, or -1. */
static int parse_expect(const char *spec, struct expect *e)
{
	const char *p = spec;
	int n = 0;

	while (p && *p) {
		unsigned long long o, l, sd, so;
		char x;

		if (n == MAX_EXPECT)
			return -1;
		if (sscanf(p, "%lli:%lli:x%c%lli", &o, &l, &x, &so) == 4 && x == ':')
			sd = CHANGED;
		else if (sscanf(p, "%lli:%lli:%lli:%lli", &o, &l, &sd, &so) != 4)
			return -1;
		e[n++] = (struct expect){ o, l, sd, so };
		p = strchr(p, ',');
		p = p ? p + 1 : NULL;
	}
	return n;
}

/* The range of `off` (the last one holding it), or NULL: the fill's. */
static const struct expect *range_of(const struct expect *e, int n, uint64_t off)
{
	for (int i = n - 1; i >= 0; i--)
		if (off >= e[i].off && off - e[i].off < e[i].len)
			return &e[i];
	return NULL;
}

/* PEERMEM_CUDA_STANDIN_EXPECT at cuMemFree: one line on stderr. */
static void gpu_check(struct gpu_alloc *a)
{
	const char *spec = getenv("PEERMEM_CUDA_STANDIN_EXPECT");
	size_t n = a->va + a->size - a->ptr, wrong = 0, first = 0, kept = 0, changed = 0;
	unsigned char *b, got = 0, want = 0;
	struct expect e[MAX_EXPECT];
	uint64_t fill;
	int set, ne;

	if (!spec || !*spec)
		return;
	fill = env_seed("PEERMEM_CUDA_STANDIN_FILL", &set);
	ne = parse_expect(spec, e);
	if (ne < 0) {
		say("PEERMEM_CUDA_STANDIN_EXPECT=%s: not OFF:LEN:SEED:SRC[,...] (at most %d)", spec,
		    MAX_EXPECT);
		return;
	}
	b = malloc(CHUNK);
	if (!b)
		return;
	for (size_t done = 0; done < n; done += CHUNK) {
		size_t k = n - done < CHUNK ? n - done : CHUNK;

		if (gpu_copy_raw(a->ptr + done, b, k, NVSIM_MEMCPY_DTOH)) {
			say("check of 0x%llx (%zu bytes): cannot read it back", a->ptr, n);
			free(b);
			return;
		}
		for (size_t i = 0; i < k; i++) {
			const struct expect *r = range_of(e, ne, done + i);
			unsigned char w;

			if (r && r->seed == CHANGED) {
				changed++;
				kept += b[i] == pattern(done + i, fill);
				continue;
			}
			w = r ? pattern(r->src + (done + i - r->off), r->seed) : pattern(done + i, fill);
			if (b[i] != w && !wrong++) {
				first = done + i;
				got = b[i];
				want = w;
			}
		}
	}
	free(b);
	if (kept > changed / 64)
		say("check of 0x%llx (%zu bytes, %s): %zu of the %zu bytes that were to be overwritten still hold the fill",
		    a->ptr, n, spec, kept, changed);
	else if (wrong)
		say("check of 0x%llx (%zu bytes, %s): %zu wrong byte(s), the first at +0x%zx: 0x%02x, expected 0x%02x",
		    a->ptr, n, spec, wrong, first, got, want);
	else
		say("check of 0x%llx (%zu bytes, %s): ok", a->ptr, n, spec);
}

/* PEERMEM_CUDA_STANDIN_FREE_AFTER_MS: the application thread's cudaFree. */

static void *free_later(void *arg)
{
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)arg;
	const char *ms = getenv("PEERMEM_CUDA_STANDIN_FREE_AFTER_MS");

	usleep(strtoul(ms, NULL, 0) * 1000);
	say("freeing 0x%llx under traffic (PEERMEM_CUDA_STANDIN_FREE_AFTER_MS=%s): %s", p, ms,
	    gpu_free(p) ? "not allocated any more" : "freed");
	return NULL;
}

CUresult gpu_malloc(CUdeviceptr *p, size_t size)
{
	const char *o = getenv("PEERMEM_CUDA_STANDIN_OFFSET");
	struct nvsim_alloc na = { 0 };
	struct gpu_alloc *a = NULL;
	unsigned long off = o ? strtoul(o, NULL, 0) : 0;
	const char *ms;
	uint64_t seed;
	size_t len;
	char *r;
	int set;

	if (!size || off >= GPU_PAGE)
		return CUDA_ERROR_INVALID_VALUE;
	if (size > (1UL << 40) || gpu_layout(&na))
		return CUDA_ERROR_OUT_OF_MEMORY;
	len = (size + off + GPU_PAGE - 1) & ~(GPU_PAGE - 1);
	/* The driver picks the VA (in its unified address window, unique
	 * among all processes), and the process reserves it. */
	na.len = len;
	if (ioctl(nvsim, NVSIM_IOC_ALLOC, &na)) {
		say("cudaMalloc of %zu bytes: %s", len, strerror(errno));
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r = mmap((void *)(uintptr_t)na.va, len, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (r == MAP_FAILED || r != (void *)(uintptr_t)na.va) {
		struct nvsim_free f = { .va = na.va };

		say("cudaMalloc: reserving 0x%llx (%zu bytes) in this process: %s",
		    (unsigned long long)na.va, len, r == MAP_FAILED ? strerror(errno) : "moved");
		if (r != MAP_FAILED)
			munmap(r, len);
		ioctl(nvsim, NVSIM_IOC_FREE, &f);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&gpu_lock);
	for (int i = 0; i < MAX_ALLOCS && !a; i++)
		if (!gpu_allocs[i].used)
			a = &gpu_allocs[i];
	if (!a) {
		struct nvsim_free f = { .va = na.va };

		pthread_mutex_unlock(&gpu_lock);
		ioctl(nvsim, NVSIM_IOC_FREE, &f);
		munmap(r, len);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*a = (struct gpu_alloc){ .ptr = na.va + off, .va = na.va, .size = len, .resv = r,
				 .resv_len = len, .used = 1 };
	*p = a->ptr;
	pthread_mutex_unlock(&gpu_lock);
	seed = env_seed("PEERMEM_CUDA_STANDIN_FILL", &set);
	if (set && gpu_fill(*p, len - off, seed)) {
		gpu_free(*p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ms = getenv("PEERMEM_CUDA_STANDIN_FREE_AFTER_MS");
	if (ms && *ms) {
		pthread_t t;

		if (pthread_create(&t, NULL, free_later, (void *)(uintptr_t)*p) == 0)
			pthread_detach(t);
		else
			say("PEERMEM_CUDA_STANDIN_FREE_AFTER_MS: no thread: %s", strerror(errno));
	}
	return CUDA_SUCCESS;
}

CUresult gpu_free(CUdeviceptr p)
{
	struct gpu_alloc *a, copy;
	struct nvsim_free f;

	pthread_mutex_lock(&gpu_lock);
	a = gpu_alloc_at(p);
	if (!a || a->ptr != p) {
		pthread_mutex_unlock(&gpu_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	copy = *a;
	memset(a, 0, sizeof(*a));
	pthread_mutex_unlock(&gpu_lock);
	gpu_check(&copy);
	f.va = copy.va;
	if (ioctl(nvsim, NVSIM_IOC_FREE, &f))
		say("cudaFree of 0x%llx: %s", copy.va, strerror(errno));
	munmap(copy.resv, copy.resv_len);
	return CUDA_SUCCESS;
}

