/* A stand-in for libnvidia-ml.so.1 with the real NVML ABI, so that the dlopen loader (symbol
 * resolution, struct versions, record strides, return codes) is tested without a GPU. Behaviour
 * is chosen by environment variables read at nvmlInit:
 *   STUB_NVML_INIT_FAIL=N   nvmlInit_v2 returns N
 *   STUB_NVML_WIDE=1        process records are 32 bytes (the R535 layout) instead of 24
 * Device 0 is healthy with two compute processes; device 1 answers NOT_SUPPORTED for memory v2 (so
 * the loader falls back to v1), for power, for its maximum PCIe link width and for its memory bus
 * width; device 2 is lost (GPU_IS_LOST). Devices 0, 1 and 2 sit at PCI bus ids 0000:3b:00.0,
 * 0000:5b:00.0 and 0000:1b:00.0: NVML's index order need not be the bus order. */
#include <stdlib.h>
#include <string.h>

typedef struct stub_device {
  int index;
} * nvmlDevice_t;
static struct stub_device devices[3] = {{0}, {1}, {2}};
static const char* bus_ids[3] = {"0000:3b:00.0", "0000:5b:00.0", "0000:1b:00.0"};
static int wide = 0;
static int initialized = 0;

#define EXPORT __attribute__((visibility("default")))

EXPORT int nvmlInit_v2(void) {
  const char* f = getenv("STUB_NVML_INIT_FAIL");
  if (f && atoi(f) != 0) return atoi(f);
  const char* w = getenv("STUB_NVML_WIDE");
  wide = w && atoi(w) == 1;
  initialized = 1;
  return 0;
}
EXPORT int nvmlShutdown(void) {
  initialized = 0;
  return 0;
}
EXPORT const char* nvmlErrorString(int r) {
  switch (r) {
    case 3:
      return "Not Supported";
    case 9:
      return "Driver Not Loaded";
    case 15:
      return "GPU is lost";
    case 25:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}
EXPORT int nvmlSystemGetDriverVersion(char* buf, unsigned len) {
  strncpy(buf, "580.00.stub", len);
  return 0;
}
EXPORT int nvmlDeviceGetCount_v2(unsigned* n) {
  if (!initialized) return 1;
  *n = 3;
  return 0;
}
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t* d) {
  if (i >= 3) return 2;
  *d = &devices[i];
  return 0;
}
EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* d) {
  if (!initialized) return 1;
  for (int i = 0; i < 3; ++i) {
    if (strcmp(bus_id, bus_ids[i]) == 0) {
      *d = &devices[i];
      return 0;
    }
  }
  return 6; /* NOT_FOUND */
}
EXPORT int nvmlDeviceGetIndex(nvmlDevice_t d, unsigned* i) {
  *i = (unsigned)d->index;
  return 0;
}
EXPORT int nvmlDeviceGetName(nvmlDevice_t d, char* buf, unsigned len) {
  if (d->index == 2) return 15;
  strncpy(buf, "Stub GPU", len);
  return 0;
}
EXPORT int nvmlDeviceGetUUID(nvmlDevice_t d, char* buf, unsigned len) {
  if (d->index == 2) return 15;
  strncpy(buf, d->index == 0 ? "GPU-stub-0" : "GPU-stub-1", len);
  return 0;
}
typedef struct {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} mem_v2;
typedef struct {
  unsigned long long total, free, used;
} mem_v1;
EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, mem_v2* m) {
  if (d->index == 2) return 15;
  if (d->index == 1) return 3;
  if (m->version != ((unsigned)sizeof(mem_v2) | (2u << 24))) return 25;
  m->total = 80ull << 30;
  m->reserved = 512ull << 20;
  m->used = 10ull << 30;
  m->free = m->total - m->used;
  return 0;
}
EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, mem_v1* m) {
  if (d->index == 2) return 15;
  m->total = 40ull << 30;
  m->used = 1ull << 30;
  m->free = m->total - m->used;
  return 0;
}
struct proc24 {
  unsigned int pid;
  unsigned long long used;
  unsigned int gi, ci;
};
struct proc32 {
  unsigned int pid;
  unsigned long long used;
  unsigned int gi, ci;
  unsigned long long cc;
};
EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned* count, void* infos) {
  if (d->index == 2) return 15;
  unsigned n = d->index == 0 ? 2 : 0;
  if (*count < n) {
    *count = n;
    return 7;
  }
  *count = n;
  for (unsigned i = 0; i < n; ++i) {
    unsigned pid = 1000 + i;
    unsigned long long used =
        (i == 0) ? (3ull << 30) : ~0ull; /* second: NVML_VALUE_NOT_AVAILABLE */
    if (wide) {
      struct proc32* p = (struct proc32*)infos + i;
      p->pid = pid;
      p->used = used;
      p->gi = 0xFFFFFFFFu;
      p->ci = 0xFFFFFFFFu;
      p->cc = 0;
    } else {
      struct proc24* p = (struct proc24*)infos + i;
      p->pid = pid;
      p->used = used;
      p->gi = 0xFFFFFFFFu;
      p->ci = 0xFFFFFFFFu;
    }
  }
  return 0;
}
EXPORT int nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned* count, void* infos) {
  if (d->index == 2) return 15;
  unsigned n = d->index == 0 ? 1 : 0;
  if (*count < n) {
    *count = n;
    return 7;
  }
  *count = n;
  if (n) {
    /* pid 1000 is listed as graphics too: merged with its compute entry */
    struct proc24* p = (struct proc24*)infos;
    if (wide) {
      struct proc32* q = (struct proc32*)infos;
      q->pid = 1000;
      q->used = 3ull << 30;
      q->cc = 0;
    } else {
      p->pid = 1000;
      p->used = 3ull << 30;
    }
  }
  return 0;
}
typedef struct {
  unsigned int gpu, memory;
} util;
EXPORT int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, util* u) {
  if (d->index == 2) return 15;
  u->gpu = 75;
  u->memory = 20;
  return 0;
}
EXPORT int nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned* kbps) {
  if (d->index == 2) return 15;
  *kbps = counter == 0 ? 1000 : 2000;
  return 0;
}
EXPORT int nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned* mhz) {
  if (d->index == 2) return 15;
  *mhz = type == 1 ? 1980 : 2619;
  return 0;
}
EXPORT int nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned* mhz) {
  if (d->index == 2) return 15;
  *mhz = type == 1 ? 1980 : 3201;
  return 0;
}
EXPORT int nvmlDeviceGetMemoryBusWidth(nvmlDevice_t d, unsigned* bits) {
  if (d->index == 2) return 15;
  if (d->index == 1) return 3;
  *bits = 5120;
  return 0;
}
/* Device 0's link idles at gen 1 x16 and can train to gen 5 x16. */
EXPORT int nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned* gen) {
  if (d->index == 2) return 15;
  *gen = 1;
  return 0;
}
EXPORT int nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned* width) {
  if (d->index == 2) return 15;
  *width = 16;
  return 0;
}
EXPORT int nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned* gen) {
  if (d->index == 2) return 15;
  *gen = 5;
  return 0;
}
EXPORT int nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned* width) {
  if (d->index == 2) return 15;
  if (d->index == 1) return 3;
  *width = 16;
  return 0;
}
EXPORT int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned* t) {
  if (d->index == 2) return 15;
  *t = 48;
  return 0;
}
EXPORT int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned* mw) {
  if (d->index == 2) return 15;
  if (d->index == 1) return 3;
  *mw = 250500;
  return 0;
}
EXPORT int nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned* cur, unsigned* pending) {
  if (d->index == 2) return 15;
  *cur = 0;
  *pending = 0;
  return 0;
}
EXPORT int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned* n) {
  *n = 0;
  return 0;
}
EXPORT int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned i, nvmlDevice_t* m) {
  return 6;
}
typedef struct {
  unsigned int fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType, nvmlReturn;
  union {
    double d;
    unsigned int ui;
    unsigned long long ull;
  } value;
} field_value;
static unsigned long long pcie_calls = 0;
/* Field 91 (NVLink link count) = 0; 197/198 (PCIe tx/rx cumulative bytes) grow by 1 MB / 2 MB per
 * call on device 0 and are not supported elsewhere; anything else: NOT_SUPPORTED per field. */
EXPORT int nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, field_value* values) {
  if (d->index == 2) return 15;
  int any = 0;
  for (int i = 0; i < count; ++i) {
    field_value* v = &values[i];
    v->nvmlReturn = 3;
    if (v->fieldId == 91) {
      v->valueType = 1;
      v->value.ui = 0;
      v->nvmlReturn = 0;
      any = 1;
    } else if (d->index == 0 && (v->fieldId == 197 || v->fieldId == 198)) {
      if (v->fieldId == 197) ++pcie_calls;
      v->valueType = 3;
      v->value.ull = pcie_calls * (v->fieldId == 197 ? 1000000ull : 2000000ull);
      v->nvmlReturn = 0;
      any = 1;
    }
  }
  return any ? 0 : 3;
}
