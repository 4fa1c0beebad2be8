/* Ferry public C API.
 *
 * libferry.so is normally loaded with LD_PRELOAD under an unchanged mpirun
 * line. These few functions let portable programs (and Ferry's own tests)
 * allocate memory that Ferry treats as device memory: a real GPU allocation on
 * the current device when a GPU is present, emulated device memory otherwise
 * (FERRY_DEVICE selects). Programs that do not link libferry.so can look the
 * symbols up with dlsym(RTLD_DEFAULT, ...) when it is preloaded. */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1
#define FERRY_VERSION_PATCH 0

/* Device memory on the active backend; NULL on failure or bytes == 0. */
void* ferry_device_malloc(size_t bytes);
/* Frees memory from ferry_device_malloc; NULL is ignored. */
void ferry_device_free(void* ptr);
/* Blocking copy in any direction (host or device on either side).
 * Returns 0 on success, non-zero on failure. */
int ferry_memcpy(void* dst, const void* src, size_t bytes);
/* 1 when ptr is device memory (of a GPU or the emulated device), which host
 * code must not touch; 0 for host and managed memory. */
int ferry_is_device_memory(const void* ptr);
/* Name of the active device backend: "cuda", "emulated" or "none". */
const char* ferry_device_backend(void);
/* The physical device the calling thread allocates on, as a number: equal in
 * two processes exactly when they share one GPU (a hash of its UUID). Each
 * process has an emulated device of its own; 0 when there is no device. */
unsigned long long ferry_device_key(void);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_FERRY_H */
