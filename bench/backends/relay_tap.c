/* relay_tap.c: the TAP back end. The relay creates two TAP devices (IFF_TAP | IFF_NO_PI, no vnet header, so
 * no offloads reach user space) in its own namespace and prints "ready"; the driver then moves each device
 * into a host namespace, where it is that host's only interface (no veth). One thread reads up to 64 frames
 * from one device (one read() per frame: the tun fd has no batched receive for user space) and writes each
 * to the other device; sleeps in poll() when both are empty.
 * With --queues N (IFF_MULTI_QUEUE) each device gets N fds, all served by the same thread.
 * Usage: relay_tap TAP_A TAP_B [--queues N] */
#include "relay_common.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MAXQ 8

static int tap_open(const char *name, int multi)
{
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		die("open /dev/net/tun: %s (expected the tun module)", strerror(errno));
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (multi ? IFF_MULTI_QUEUE : 0);
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0)
		die("TUNSETIFF %s: %s", name, strerror(errno));
	return fd;
}

static char g_buf[BATCH][FRAME_MAX];
static size_t g_len[BATCH];

/* Read up to BATCH frames from one queue fd and write them to fd_out; returns frames read. */
static int forward(int fd_in, int fd_out, struct dir_stats *st)
{
	int n = 0;
	while (n < BATCH) {
		ssize_t r = read(fd_in, g_buf[n], FRAME_MAX);
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			die("read tap: %s", strerror(errno));
		}
		g_len[n++] = (size_t)r;
	}
	for (int i = 0; i < n; i++) {
		st->bytes += g_len[i];
		if (write(fd_out, g_buf[i], g_len[i]) == (ssize_t)g_len[i])
			st->packets++;
		else
			st->drops++; /* EIO while the other device is down, EAGAIN when its queue is full */
	}
	return n;
}

int main(int argc, char **argv)
{
	int queues = 1;
	if (argc == 5 && strcmp(argv[3], "--queues") == 0)
		queues = atoi(argv[4]);
	else if (argc != 3)
		die("usage: relay_tap TAP_A TAP_B [--queues N]");
	if (queues < 1 || queues > MAXQ)
		die("--queues %d out of range: expected 1..%d", queues, MAXQ);
	install_signals();
	int fd[2][MAXQ];
	for (int s = 0; s < 2; s++)
		for (int q = 0; q < queues; q++)
			fd[s][q] = tap_open(argv[1 + s], queues > 1);
	printf("{\"type\":\"ready\",\"backend\":\"tap\",\"pid\":%d,\"if_a\":\"%s\",\"if_b\":\"%s\",\"queues\":%d}\n",
	       getpid(), argv[1], argv[2], queues);
	fflush(stdout);
	struct dir_stats st[2] = {0};
	struct pollfd pfd[2 * MAXQ];
	for (int s = 0; s < 2; s++)
		for (int q = 0; q < queues; q++)
			pfd[s * queues + q] = (struct pollfd){.fd = fd[s][q], .events = POLLIN};
	while (!g_stop) {
		int got = 0;
		for (int q = 0; q < queues; q++) {
			/* a frame read from any queue of A leaves on the same-numbered queue of B (any queue would do) */
			got += forward(fd[0][q], fd[1][q], &st[0]);
			got += forward(fd[1][q], fd[0][q], &st[1]);
		}
		if (got == 0) {
			st[0].polls_idle++;
			poll(pfd, 2 * queues, 1000);
		}
	}
	print_stats("tap", st);
	return 0;
}
