/* The handle a kernel drives an MPI window with (see ferry/device.h). Plain
 * C and trivially copyable: pass it to kernels by value. */
#ifndef FERRY_DEVICE_HANDLE_H
#define FERRY_DEVICE_HANDLE_H

/* Words of each rank's sync block: [0] barrier arrivals from every rank,
 * [1] barriers this rank has entered. */
#define FERRY_DEVICE_SYNC_WORDS 8

typedef struct ferry_window_device {
  int rank;                              /* this rank in the window's group */
  int size;                              /* ranks in the window's group */
  unsigned long long bytes;              /* this rank's window memory, bytes */
  /* Device-resident tables with one entry per rank: */
  void* const* peers;                    /* window memory as this GPU reaches it; NULL: unreachable */
  const unsigned long long* peer_bytes;  /* window bytes */
  unsigned long long* const* sync;       /* sync blocks of FERRY_DEVICE_SYNC_WORDS words; NULL: unreachable */
  /* Ranks this GPU cannot map (on other machines) are reached through a
   * GDA queue that a proxy thread of this process drains (ferry/gda_ring.h):
   * NULL where every rank is mapped. */
  void* gda_ring;                        /* ferry::gda::GdaRing, device-resident */
  unsigned short gda_window;             /* the window memory's id at the proxy */
  unsigned short gda_sync_window;        /* the sync blocks' id */
} ferry_window_device_t;

#endif /* FERRY_DEVICE_HANDLE_H */
