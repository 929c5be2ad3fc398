/* relay_afpacket.c: the baseline back end, as roughnet-wire does it today. One AF_PACKET SOCK_RAW socket per
 * veth end (bound with ETH_P_ALL, promiscuous, PACKET_IGNORE_OUTGOING, 16 MiB / 8 MiB buffers); one thread
 * receives up to 64 frames per recvmmsg on each side and sends them with one sendmmsg on the other side;
 * sleeps in poll() when both sides are empty.
 * Usage: relay_afpacket IF_A IF_B */
#include "relay_common.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

static int open_side(const char *ifname)
{
	unsigned idx = if_nametoindex(ifname);
	if (!idx)
		die("interface %s not found: expected an existing interface in this namespace", ifname);
	int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket(AF_PACKET): %s", strerror(errno));
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = idx};
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0)
		die("bind %s: %s", ifname, strerror(errno));
	struct packet_mreq mr = {.mr_ifindex = idx, .mr_type = PACKET_MR_PROMISC};
	if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof(mr)) < 0)
		die("promiscuous %s: %s", ifname, strerror(errno));
	int one = 1, rcv = 16 << 20, snd = 8 << 20;
	if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) < 0)
		die("PACKET_IGNORE_OUTGOING %s: %s", ifname, strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd));
	return fd;
}

struct batch {
	struct mmsghdr msg[BATCH];
	struct iovec iov[BATCH];
	char buf[BATCH][FRAME_MAX];
};

static struct batch g_batch[2];

/* Receive one batch from fd_in and send it on fd_out; returns the number of frames received. */
static int forward(int fd_in, int fd_out, struct batch *b, struct dir_stats *st)
{
	for (int i = 0; i < BATCH; i++) {
		b->iov[i].iov_base = b->buf[i];
		b->iov[i].iov_len = FRAME_MAX;
		memset(&b->msg[i].msg_hdr, 0, sizeof(b->msg[i].msg_hdr));
		b->msg[i].msg_hdr.msg_iov = &b->iov[i];
		b->msg[i].msg_hdr.msg_iovlen = 1;
	}
	int n = recvmmsg(fd_in, b->msg, BATCH, MSG_DONTWAIT, NULL);
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		die("recvmmsg: %s", strerror(errno));
	}
	for (int i = 0; i < n; i++) {
		b->iov[i].iov_len = b->msg[i].msg_len;
		st->bytes += b->msg[i].msg_len;
	}
	int sent = 0;
	while (sent < n) {
		int r = sendmmsg(fd_out, b->msg + sent, n - sent, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			/* ENOBUFS, ENETDOWN, EMSGSIZE: drop the frame that failed, carry on */
			st->drops++;
			sent++;
			continue;
		}
		sent += r;
		st->packets += r;
	}
	return n;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		die("usage: relay_afpacket IF_A IF_B");
	install_signals();
	int fd[2] = {open_side(argv[1]), open_side(argv[2])};
	printf("{\"type\":\"ready\",\"backend\":\"afpacket\",\"pid\":%d,\"if_a\":\"%s\",\"if_b\":\"%s\"}\n",
	       getpid(), argv[1], argv[2]);
	fflush(stdout);
	struct dir_stats st[2] = {0};
	struct pollfd pfd[2] = {{.fd = fd[0], .events = POLLIN}, {.fd = fd[1], .events = POLLIN}};
	while (!g_stop) {
		int got = forward(fd[0], fd[1], &g_batch[0], &st[0]);
		got += forward(fd[1], fd[0], &g_batch[1], &st[1]);
		if (got == 0) {
			st[0].polls_idle++;
			poll(pfd, 2, 1000);
		}
	}
	for (int d = 0; d < 2; d++) {
		struct tpacket_stats ps;
		socklen_t len = sizeof(ps);
		if (getsockopt(fd[d], SOL_PACKET, PACKET_STATISTICS, &ps, &len) == 0)
			st[d].kernel_drops = ps.tp_drops;
	}
	print_stats("afpacket", st);
	return 0;
}
