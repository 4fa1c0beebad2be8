#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include "device_alloc.h"

#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void* (*malloc_fn)(size_t);
typedef void (*free_fn)(void*);
typedef int (*memcpy_fn)(void*, const void*, size_t);
typedef const char* (*backend_fn)(void);
typedef unsigned long long (*key_fn)(void);
typedef int (*is_device_fn)(const void*);

static struct {
  malloc_fn device_malloc;
  free_fn device_free;
  memcpy_fn copy;
  const char* backend;
} allocator;

static void fail(const char* message) {
  int initialized = 0;
  fprintf(stderr, "mpi_suite: %s\n", message);
  fflush(stderr);
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static int host_copy(void* dst, const void* src, size_t bytes) {
  memcpy(dst, src, bytes);
  return 0;
}

static int host_buffers_requested(void) {
  const char* value = getenv("FERRY_SUITE_HOST_BUFFERS");
  return value != NULL && strcmp(value, "1") == 0;
}

/* Stores the address of `name` (NULL if absent) in the function pointer at
 * `slot`. dlsym returns an object pointer; POSIX lets it become a function
 * pointer, ISO C does not, hence the byte copy. */
static void resolve(const char* name, void* slot) {
  void* symbol = dlsym(RTLD_DEFAULT, name);
  memcpy(slot, &symbol, sizeof symbol);
}

const char* suite_ferry_backend(void) {
  backend_fn backend;
  resolve("ferry_device_backend", &backend);
  return backend ? backend() : NULL;
}

int suite_mpi_library_is(const char* name) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  version[length < MPI_MAX_LIBRARY_VERSION_STRING ? length : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
  return strstr(version, name) != NULL;
}

unsigned long long suite_device_key(void) {
  key_fn key;
  resolve("ferry_device_key", &key);
  return key ? key() : 0;
}

void suite_device_init(void) {
  if (host_buffers_requested()) {
    allocator.device_malloc = malloc;
    allocator.device_free = free;
    allocator.copy = host_copy;
    allocator.backend = "host";
    return;
  }
  resolve("ferry_device_malloc", &allocator.device_malloc);
  resolve("ferry_device_free", &allocator.device_free);
  resolve("ferry_memcpy", &allocator.copy);
  allocator.backend = suite_ferry_backend();
  if (!allocator.device_malloc || !allocator.device_free || !allocator.copy || !allocator.backend) {
    fail(
        "no device allocator: run under LD_PRELOAD=libferry.so, or set "
        "FERRY_SUITE_HOST_BUFFERS=1 to use host buffers");
  }
  if (strcmp(allocator.backend, "none") == 0) {
    fail("libferry.so is loaded but reports no device backend (check FERRY_DEVICE)");
  }
}

void* suite_device_malloc(size_t bytes) {
  void* ptr = allocator.device_malloc(bytes);
  if (ptr == NULL) fail("device allocation failed");
  return ptr;
}

void suite_device_free(void* ptr) { allocator.device_free(ptr); }

void suite_memcpy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (allocator.copy(dst, src, bytes) != 0) fail("ferry_memcpy failed");
}

const char* suite_device_backend(void) { return allocator.backend; }

int suite_is_device_memory(const void* ptr) {
  is_device_fn is_device;
  resolve("ferry_is_device_memory", &is_device);
  return is_device ? is_device(ptr) : 0;
}
