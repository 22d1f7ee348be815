// clockshim: an LD_PRELOAD library that runs a process's wall clock ahead
// of the host's by an offset the test harness can change at any moment.
//
// REDISPROC_CLOCK_FILE names a file whose first 8 bytes hold the offset in
// nanoseconds (a native-endian int64). The file is mapped shared, so a
// store by the harness moves the clock at once, without a restart.
//
// Only gettimeofday and time are replaced: redis-server 7.0 reads the wall
// clock through them (key expiry, TIME, INFO). clock_gettime is left alone,
// so CLOCK_MONOTONIC keeps running as on a host whose clock was stepped,
// and jemalloc's early clock_gettime calls never reach this file (that
// reentry is what deadlocks libfaketime under jemalloc-linked Redis). The
// real time comes from libc's clock_gettime, which is not interposed.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const int64_t *offset_ptr;

// offset_ns maps the offset file on first use. Neither getenv, open nor
// mmap allocate, so this is safe however early it runs. Two threads may
// both map it; either mapping is as good.
static int64_t offset_ns(void) {
	const int64_t *p = __atomic_load_n(&offset_ptr, __ATOMIC_ACQUIRE);
	if (p == NULL) {
		const char *path = getenv("REDISPROC_CLOCK_FILE");
		int fd = path != NULL ? open(path, O_RDONLY | O_CLOEXEC) : -1;
		if (fd < 0) {
			abort(); // a clock we cannot read must not silently be the real one
		}
		void *m = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (m == MAP_FAILED) {
			abort();
		}
		p = m;
		__atomic_store_n(&offset_ptr, p, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	(void)tz; // obsolete; glibc ignores it too
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + offset_ns();
	tv->tv_sec = (time_t)(ns / 1000000000);
	tv->tv_usec = (suseconds_t)(ns % 1000000000 / 1000);
	return 0;
}

time_t time(time_t *t) {
	struct timeval tv;
	gettimeofday(&tv, NULL);
	if (t != NULL) {
		*t = tv.tv_sec;
	}
	return tv.tv_sec;
}
