// SPDX-License-Identifier: GPL-2.0
/*
 * cuda-standin.c -- a libcuda.so for the bench: the CUDA driver API subset
 * peermem-probe (userspace/probe-lib/src/cuda.rs) and perftest 25.01
 * (src/cuda_memory.c) call, with one GPU whose memory behaves like device
 * memory to the kernel.  A test plant of the bench
 * (tests/vm/cases/probe-cuda-standin.sh, perftest-cuda.sh); never
 * installed.
 *
 * Device memory: a memfd turned into a dma-buf by /dev/udmabuf, and mapped
 * through that dma-buf.  The kernel maps a udmabuf with VM_PFNMAP (its
 * pages are inserted as raw PFNs), so get_user_pages() refuses it with
 * EFAULT as it refuses a GPU BAR mapping: ibv_reg_mr on it needs a
 * peer-memory client, exactly as on cuMemAlloc memory.  Each allocation
 * checks its VmFlags in /proc/self/smaps and fails (out of memory, with a
 * line on stderr) if the mapping is not VM_PFNMAP/VM_IO, so the stand-in
 * cannot hand out pinnable memory.  The dma-buf export of a range is the
 * same udmabuf: the pages the CPU copies into are the pages an importer
 * gets.
 *
 * The device: one GPU, ordinal 0, that claims dma-buf and GPUDirect RDMA
 * support (so that the probe tries both), named "peermem-rs bench GPU
 * stand-in"; its PCI bus id is PEERMEM_CUDA_STANDIN_BDF, else the first
 * PCI function in sysfs.  The driver version is 12.4, which rejects the
 * dma-buf PCIe mapping flag (CUDA 12.8+) as a 12.4 driver does.
 *
 * Gentler than the real driver in one way: the CPU can touch this memory
 * (cuMemcpy is a memcpy through the mapping), where cuMemAlloc memory has
 * no CPU mapping; peermem-probe touches GPU memory only through cuMemcpy,
 * so none of its verdicts depend on that.

 *
 * PEERMEM_CUDA_STANDIN_MEMORY=nvsim: the memory is the simulated NVIDIA
 * driver's instead (nvsim-memory.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/udmabuf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "standin.h"

/* cuda.h values of the attributes the probe reads. */
#define ATTR_INTEGRATED 18
#define ATTR_PCI_BUS_ID 33
#define ATTR_PCI_DEVICE_ID 34
#define ATTR_PAGEABLE_USES_HOST_PAGE_TABLES 100
#define ATTR_GDR_WITH_VMM 110
#define ATTR_GDR 116
#define ATTR_GDR_FLUSH_OPTIONS 117
#define ATTR_GDR_WRITES_ORDERING 118
#define ATTR_DMA_BUF 124
#define HANDLE_TYPE_DMA_BUF_FD 1
#define GRANULARITY (2UL << 20)

static int initialised;
static int the_context; /* its address is the primary context */

/* One allocation: a memfd, its udmabuf, and where it is mapped (0: not). */
struct alloc {
	int memfd, dmabuf;
	size_t size;
	CUdeviceptr va;
	int used;
};
static struct alloc allocs[MAX_ALLOCS];

/* A new allocation of size bytes (page-rounded): memfd + udmabuf. */
static struct alloc *alloc_new(size_t size)
{
	struct udmabuf_create c = { 0 };
	struct alloc *a = NULL;
	int dev, i;

	for (i = 0; i < MAX_ALLOCS; i++)
		if (!allocs[i].used) {
			a = &allocs[i];
			break;
		}
	if (!a || !size)
		return NULL;
	size = (size + 4095) & ~4095UL;
	a->memfd = memfd_create("cuda-standin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (a->memfd < 0)
		return NULL;
	/* udmabuf takes only a memfd that cannot shrink. */
	if (ftruncate(a->memfd, size) || fcntl(a->memfd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		close(a->memfd);
		return NULL;
	}
	dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		say("/dev/udmabuf: %s", strerror(errno));
		close(a->memfd);
		return NULL;
	}
	c.memfd = a->memfd;
	c.flags = UDMABUF_FLAGS_CLOEXEC;
	c.size = size;
	a->dmabuf = ioctl(dev, UDMABUF_CREATE, &c);
	close(dev);
	if (a->dmabuf < 0) {
		say("UDMABUF_CREATE of %zu bytes: %s", size, strerror(errno));
		close(a->memfd);
		return NULL;
	}
	a->size = size;
	a->va = 0;
	a->used = 1;
	return a;
}

static void alloc_free(struct alloc *a)
{
	close(a->dmabuf);
	close(a->memfd);
	memset(a, 0, sizeof(*a));
}

static struct alloc *alloc_at(CUdeviceptr p)
{
	for (int i = 0; i < MAX_ALLOCS; i++)
		if (allocs[i].used && allocs[i].va && p >= allocs[i].va &&
		    p < allocs[i].va + allocs[i].size)
			return &allocs[i];
	return NULL;
}

/* Whether the mapping at va has VM_PFNMAP or VM_IO (smaps "pf"/"io"). */
static int unpinnable(CUdeviceptr va)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, ok = 0;
	unsigned long long lo, hi;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2) {
			in = va >= lo && va < hi;
		} else if (in && !strncmp(line, "VmFlags:", 8)) {
			ok = strstr(line, " pf") || strstr(line, " io");
			if (!ok)
				say("the mapping at 0x%llx is neither VM_PFNMAP nor VM_IO, get_user_pages "
				    "could pin it: refused (%.*s)", va, (int)strcspn(line, "\n"), line);
			break;
		}
	}
	fclose(f);
	return ok;
}

/* Maps allocation a at va (0: anywhere); 0 on failure. */
static CUdeviceptr map_at(struct alloc *a, CUdeviceptr va)
{
	void *p = mmap((void *)va, a->size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | (va ? MAP_FIXED : 0), a->dmabuf, 0);

	if (p == MAP_FAILED) {
		say("mmap of the udmabuf (%zu bytes): %s", a->size, strerror(errno));
		return 0;
	}
	if (!unpinnable((CUdeviceptr)p)) {
		munmap(p, a->size);
		return 0;
	}
	a->va = (CUdeviceptr)p;
	return a->va;
}

CUresult cuInit(unsigned int flags)
{
	const char *m = getenv("PEERMEM_CUDA_STANDIN_MEMORY");

	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (initialised)
		return CUDA_SUCCESS;
	if (m && !strcmp(m, "nvsim")) {
		nvsim = open("/dev/nvidia_p2p_sim", O_RDWR | O_CLOEXEC);
		if (nvsim < 0) {
			say("PEERMEM_CUDA_STANDIN_MEMORY=nvsim: /dev/nvidia_p2p_sim: %s", strerror(errno));
			return CUDA_ERROR_NO_DEVICE;
		}
	} else if (m && *m && strcmp(m, "udmabuf")) {
		say("PEERMEM_CUDA_STANDIN_MEMORY=%s: not nvsim or udmabuf", m);
		return CUDA_ERROR_INVALID_VALUE;
	}
	initialised = 1;
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v)
{
	*v = 12040;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
	if (!initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	*n = 1;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (!initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	if (d != 0 || len < 1)
		return d ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
	snprintf(name, len, "peermem-rs bench GPU stand-in");
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d)
{
	const char *env = getenv("PEERMEM_CUDA_STANDIN_BDF");
	char first[256] = "";
	struct dirent *e;
	DIR *dir;

	if (d != 0 || len < 13)
		return d ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
	if (!env && (dir = opendir("/sys/bus/pci/devices"))) {
		while ((e = readdir(dir)))
			if (e->d_name[0] != '.' && (!first[0] || strcmp(e->d_name, first) < 0))
				snprintf(first, sizeof(first), "%s", e->d_name);
		closedir(dir);
	}
	/* The driver's spelling: upper-case hex. */
	snprintf(bus, len, "%s", env ? env : first[0] ? first : "0000:00:00.0");
	for (char *c = bus; *c; c++)
		if (*c >= 'a' && *c <= 'f')
			*c -= 'a' - 'A';
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	if (d != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case ATTR_DMA_BUF:
	case ATTR_GDR_WITH_VMM:
		*v = nvsim < 0;
		return CUDA_SUCCESS;
	case ATTR_GDR:
		*v = 1;
		return CUDA_SUCCESS;
	case ATTR_PCI_BUS_ID:
	case ATTR_PCI_DEVICE_ID: {
		char bdf[32];
		unsigned int dom, bus, dev, fn;

		if (cuDeviceGetPCIBusId(bdf, sizeof(bdf), d) ||
		    sscanf(bdf, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
			return CUDA_ERROR_INVALID_VALUE;
		*v = attr == ATTR_PCI_BUS_ID ? (int)bus : (int)dev;
		return CUDA_SUCCESS;
	}
	case ATTR_GDR_FLUSH_OPTIONS:
		*v = 1; /* host */
		return CUDA_SUCCESS;
	case ATTR_GDR_WRITES_ORDERING:
		*v = 100; /* owner */
		return CUDA_SUCCESS;
	case ATTR_INTEGRATED:
	case ATTR_PAGEABLE_USES_HOST_PAGE_TABLES:
		*v = 0; /* a discrete PCIe GPU, not coherent with the CPU */
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult r, const char **s)
{
	switch (r) {
	case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
	case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
	case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case CUDA_ERROR_NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
	case CUDA_ERROR_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; break;
	case CUDA_ERROR_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
	case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
	case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
	return cuGetErrorName(r, s);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	if (d != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*c = &the_context;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	return d ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c)
{
	return c == &the_context || !c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuCtxCreate_v2(CUcontext *c, unsigned int flags, CUdevice d)
{
	(void)flags;
	return cuDevicePrimaryCtxRetain(c, d);
}

CUresult cuCtxDestroy_v2(CUcontext c)
{
	return c == &the_context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *d, const char *bus)
{
	char ours[32];

	if (!initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (cuDeviceGetPCIBusId(ours, sizeof(ours), 0) || strcasecmp(bus, ours))
		return CUDA_ERROR_INVALID_DEVICE;
	*d = 0;
	return CUDA_SUCCESS;
}

/* Pinned host memory: only an integrated GPU's allocator (never asked of
 * this discrete one). */
CUresult cuMemAllocHost_v2(void **p, size_t size)
{
	(void)p;
	(void)size;
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemFreeHost(void *p)
{
	(void)p;
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	struct alloc *a;

	if (!initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (nvsim >= 0)
		return gpu_malloc(p, size);
	a = alloc_new(size);

	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = map_at(a, 0);
	if (!*p) {
		alloc_free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
	struct alloc *a;

	if (nvsim >= 0)
		return gpu_free(p);
	a = alloc_at(p);

	if (!a || a->va != p)
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)a->va, a->size);
	alloc_free(a);
	return CUDA_SUCCESS;
}

CUresult cuPointerSetAttribute(const void *value, int attr, CUdeviceptr p)
{
	(void)value;
	(void)attr;
	return alloc_at(p) || gpu_owns(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	struct alloc *a;

	if (nvsim >= 0)
		return gpu_copy(dst, (void *)src, n, 1);
	a = alloc_at(dst);

	if (!a || dst + n > a->va + a->size)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy((void *)dst, src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	struct alloc *a;

	if (nvsim >= 0)
		return gpu_copy(src, dst, n, 0);
	a = alloc_at(src);
	if (!a || src + n > a->va + a->size)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(dst, (void *)src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	size_t chunk = 1UL << 20, done;
	char *bounce;
	CUresult r = CUDA_SUCCESS;

	if (nvsim < 0) {
		struct alloc *d = alloc_at(dst), *s = alloc_at(src);

		if (!d || !s || dst + n > d->va + d->size || src + n > s->va + s->size)
			return CUDA_ERROR_INVALID_VALUE;
		memmove((void *)dst, (void *)src, n);
		return CUDA_SUCCESS;
	}
	if (!gpu_range(dst, n) || !gpu_range(src, n))
		return CUDA_ERROR_INVALID_VALUE;
	bounce = malloc(chunk);
	if (!bounce)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (done = 0; done < n && !r; done += chunk) {
		size_t k = n - done < chunk ? n - done : chunk;

		r = gpu_copy(src + done, bounce, k, 0);
		if (!r)
			r = gpu_copy(dst + done, bounce, k, 1);
	}
	free(bounce);
	return r;
}

/* Unified addressing: the direction from where each pointer lies. */
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	int d = alloc_at(dst) || gpu_owns(dst), s = alloc_at(src) || gpu_owns(src);

	if (d && s)
		return cuMemcpyDtoD_v2(dst, src, n);
	if (d)
		return cuMemcpyHtoD_v2(dst, (const void *)src, n);
	if (s)
		return cuMemcpyDtoH_v2((void *)dst, src, n);
	memmove((void *)dst, (const void *)src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char c, size_t n)
{
	size_t chunk = 1UL << 20, done;
	char *buf;
	CUresult r = CUDA_SUCCESS;

	if (!alloc_at(dst) && !gpu_range(dst, n))
		return CUDA_ERROR_INVALID_VALUE;
	buf = malloc(chunk);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(buf, c, chunk);
	for (done = 0; done < n && !r; done += chunk)
		r = cuMemcpyHtoD_v2(dst + done, buf, n - done < chunk ? n - done : chunk);
	free(buf);
	return r;
}

/* A dma-buf of a whole allocation (the probe exports whole ones). */
CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size, int type,
				       unsigned long long flags)
{
	struct alloc *a = alloc_at(p);
	int fd;

	if (nvsim >= 0) /* no GPU mapping to export (see the top) */
		return CUDA_ERROR_NOT_SUPPORTED;
	if (type != HANDLE_TYPE_DMA_BUF_FD || flags) /* 12.4: no PCIe mapping flag */
		return CUDA_ERROR_INVALID_VALUE;
	if (!a || a->va != p || size != a->size)
		return CUDA_ERROR_INVALID_VALUE;
	fd = fcntl(a->dmabuf, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)handle = fd;
	return CUDA_SUCCESS;
}

/* Virtual memory management (cuMemCreate, as NCCL allocates). */
CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option)
{
	(void)prop;
	(void)option;
	*g = GRANULARITY;
	return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const void *prop,
		     unsigned long long flags)
{
	struct alloc *a;

	(void)prop;
	if (nvsim >= 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (flags || size % GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	a = alloc_new(size);
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*h = (CUmemGenericAllocationHandle)(a - allocs) + 1;
	return CUDA_SUCCESS;
}

static struct alloc *handle(CUmemGenericAllocationHandle h)
{
	return h >= 1 && h <= MAX_ALLOCS && allocs[h - 1].used ? &allocs[h - 1] : NULL;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	struct alloc *a = handle(h);

	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	if (a->va)
		munmap((void *)a->va, a->size);
	alloc_free(a);
	return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
			     unsigned long long flags)
{
	void *r;

	(void)align;
	if (flags || addr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	r = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)r;
	return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
	return munmap((void *)p, size) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
		  unsigned long long flags)
{
	struct alloc *a = handle(h);

	if (!a || a->va || offset || flags || size != a->size)
		return CUDA_ERROR_INVALID_VALUE;
	return map_at(a, p) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc, size_t count)
{
	struct alloc *a = alloc_at(p);

	(void)desc;
	return a && count == 1 && size == a->size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
	struct alloc *a = alloc_at(p);

	if (!a || a->va != p || size != a->size)
		return CUDA_ERROR_INVALID_VALUE;
	/* Back to a reserved, inaccessible range. */
	if (mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
		 -1, 0) == MAP_FAILED)
		return CUDA_ERROR_INVALID_VALUE;
	a->va = 0;
	return CUDA_SUCCESS;
}
