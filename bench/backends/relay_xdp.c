/* relay_xdp.c: the AF_XDP back end on veth. Per veth end: an XSKMAP and a 5-instruction XDP program (written
 * here as raw BPF: bpf_redirect_map(xskmap, rx_queue_index, XDP_PASS); no clang, no libxdp dispatcher, no
 * bpffs) attached in native (driver) mode, or generic (SKB) mode when native fails or is asked for; one AF_XDP
 * socket on queue 0 with its own UMEM (libxdp's xsk API, program loading inhibited), bound zero-copy if the
 * driver allows it, else copy mode. One thread: take up to 64 descriptors from one side's RX ring, copy each
 * frame into a free TX frame of the other side's UMEM, submit, kick the TX with sendto() (copy mode sends from
 * the syscall), recycle completions and RX frames; sleep in poll() when nothing moves.
 * Usage: relay_xdp IF_A IF_B [--mode auto|drv|skb] */
#include "relay_common.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <poll.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>

/* Rings of 8192 descriptors: about as many 1.5 KB frames as the AF_PACKET relay's 16 MiB socket buffer holds.
 * 2 KiB frames (the smallest aligned size) hold 256 B of XDP headroom plus a 1514-byte frame. */
#define FRAME_SIZE 2048
#define RING 8192
#define NUM_FRAMES (2 * RING) /* frames [0, RING) feed the fill ring, [RING, NUM_FRAMES) are the TX pool */

struct side {
	const char *ifname;
	unsigned ifindex;
	int map_fd, prog_fd;
	uint32_t attach_flags;
	void *area;
	struct xsk_umem *umem;
	struct xsk_ring_prod fq, tx;
	struct xsk_ring_cons cq, rx;
	struct xsk_socket *xsk;
	int fd;
	uint64_t free_tx[NUM_FRAMES - RING];
	unsigned nfree;
	int zerocopy;
};

static int load_prog(int map_fd, char *log, size_t log_size)
{
	struct bpf_insn insns[] = {
		/* r2 = ctx->rx_queue_index */
		{.code = BPF_LDX | BPF_MEM | BPF_W, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_1,
		 .off = offsetof(struct xdp_md, rx_queue_index)},
		/* r1 = &xskmap (two instructions) */
		{.code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = BPF_REG_1, .src_reg = BPF_PSEUDO_MAP_FD, .imm = map_fd},
		{0},
		/* r3 = XDP_PASS: bpf_redirect_map's action when the slot is empty */
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_3, .imm = XDP_PASS},
		{.code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_redirect_map},
		{.code = BPF_JMP | BPF_EXIT},
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .log_buf = log, .log_size = log_size, .log_level = 1);
	return bpf_prog_load(BPF_PROG_TYPE_XDP, "rn_xsk_redir", "GPL", insns, sizeof(insns) / sizeof(insns[0]), &opts);
}

/* UMEM + socket, bound with bind_flags; returns 0 or -errno (a failed attempt's UMEM is leaked, not reused:
 * libxdp closes the UMEM's fd when the first socket on it fails). */
static int make_socket(struct side *s, uint16_t bind_flags)
{
	size_t size = (size_t)NUM_FRAMES * FRAME_SIZE;
	s->area = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (s->area == MAP_FAILED)
		die("mmap UMEM: %s", strerror(errno));
	struct xsk_umem_config ucfg = {.fill_size = RING, .comp_size = RING, .frame_size = FRAME_SIZE};
	int err = xsk_umem__create(&s->umem, s->area, size, &s->fq, &s->cq, &ucfg);
	if (err)
		die("xsk_umem__create %s: %s", s->ifname, strerror(-err));
	struct xsk_socket_config cfg = {.rx_size = RING, .tx_size = RING,
	                                .libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
	                                .xdp_flags = s->attach_flags, .bind_flags = bind_flags};
	return xsk_socket__create(&s->xsk, s->ifname, 0, s->umem, &s->rx, &s->tx, &cfg);
}

static void setup_side(struct side *s, const char *ifname, const char *mode)
{
	char log[65536] = "";
	s->ifname = ifname;
	s->ifindex = if_nametoindex(ifname);
	if (!s->ifindex)
		die("interface %s not found: expected an existing interface in this namespace", ifname);
	s->map_fd = bpf_map_create(BPF_MAP_TYPE_XSKMAP, "rn_xsks", 4, 4, 1, NULL);
	if (s->map_fd < 0)
		die("bpf_map_create XSKMAP: %s", strerror(-s->map_fd));
	s->prog_fd = load_prog(s->map_fd, log, sizeof(log));
	if (s->prog_fd < 0)
		die("bpf_prog_load XDP: %s; verifier: %s", strerror(errno), log);
	int err = -1;
	if (strcmp(mode, "skb") != 0) {
		s->attach_flags = XDP_FLAGS_DRV_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST;
		err = bpf_xdp_attach(s->ifindex, s->prog_fd, s->attach_flags, NULL);
		if (err && strcmp(mode, "drv") == 0)
			die("native XDP attach on %s: %s", ifname, strerror(-err));
		if (err)
			fprintf(stderr, "relay_xdp: native XDP on %s refused (%s), trying generic\n", ifname, strerror(-err));
	}
	if (err) {
		s->attach_flags = XDP_FLAGS_SKB_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST;
		err = bpf_xdp_attach(s->ifindex, s->prog_fd, s->attach_flags, NULL);
		if (err)
			die("generic XDP attach on %s: %s", ifname, strerror(-err));
	}
	err = make_socket(s, XDP_ZEROCOPY | XDP_USE_NEED_WAKEUP);
	if (err) {
		fprintf(stderr, "relay_xdp: zero-copy bind on %s refused (%s), using copy mode\n", ifname, strerror(-err));
		err = make_socket(s, XDP_COPY | XDP_USE_NEED_WAKEUP);
		if (err)
			die("AF_XDP copy-mode bind on %s: %s", ifname, strerror(-err));
	}
	s->fd = xsk_socket__fd(s->xsk);
	struct xdp_options opt;
	socklen_t optlen = sizeof(opt);
	if (getsockopt(s->fd, SOL_XDP, XDP_OPTIONS, &opt, &optlen) == 0)
		s->zerocopy = !!(opt.flags & XDP_OPTIONS_ZEROCOPY);
	int key = 0;
	if (bpf_map_update_elem(s->map_fd, &key, &s->fd, 0))
		die("XSKMAP update %s: %s", ifname, strerror(errno));
	uint32_t idx;
	if (xsk_ring_prod__reserve(&s->fq, RING, &idx) != RING)
		die("fill ring reserve on %s", ifname);
	for (uint32_t i = 0; i < RING; i++)
		*xsk_ring_prod__fill_addr(&s->fq, idx + i) = (uint64_t)i * FRAME_SIZE;
	xsk_ring_prod__submit(&s->fq, RING);
	for (uint32_t i = RING; i < NUM_FRAMES; i++)
		s->free_tx[s->nfree++] = (uint64_t)i * FRAME_SIZE;
}

static void complete(struct side *s)
{
	uint32_t idx;
	unsigned n = xsk_ring_cons__peek(&s->cq, RING, &idx);
	for (unsigned i = 0; i < n; i++)
		s->free_tx[s->nfree++] = *xsk_ring_cons__comp_addr(&s->cq, idx + i);
	if (n)
		xsk_ring_cons__release(&s->cq, n);
}

/* Descriptors in the TX ring that the kernel has not taken yet (copy mode takes them in sendto()). */
static unsigned tx_unsent(struct side *s)
{
	return s->tx.cached_prod - __atomic_load_n(s->tx.consumer, __ATOMIC_ACQUIRE);
}

static void kick(struct side *s)
{
	if (tx_unsent(s) && sendto(s->fd, NULL, 0, MSG_DONTWAIT, NULL, 0) < 0 && errno != EAGAIN &&
	    errno != EBUSY && errno != ENOBUFS && errno != ENETDOWN && errno != EINTR)
		die("sendto kick %s: %s", s->ifname, strerror(errno));
}

static int forward(struct side *in, struct side *out, struct dir_stats *st)
{
	uint32_t idx_rx, idx_tx = 0, idx_fq;
	complete(out);
	unsigned n = xsk_ring_cons__peek(&in->rx, BATCH, &idx_rx);
	if (!n) {
		if (xsk_ring_prod__needs_wakeup(&in->fq))
			recvfrom(in->fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
		return 0;
	}
	unsigned want = n < out->nfree ? n : out->nfree;
	unsigned ntx = want ? xsk_ring_prod__reserve(&out->tx, want, &idx_tx) : 0;
	while (xsk_ring_prod__reserve(&in->fq, n, &idx_fq) != n)
		; /* cannot stay full: it holds at most RING frames and n of them are in our hands */
	for (unsigned i = 0; i < n; i++) {
		const struct xdp_desc *d = xsk_ring_cons__rx_desc(&in->rx, idx_rx + i);
		st->bytes += d->len;
		if (i < ntx) {
			uint64_t t = out->free_tx[--out->nfree];
			memcpy((char *)out->area + t, xsk_umem__get_data(in->area, d->addr), d->len);
			struct xdp_desc *td = xsk_ring_prod__tx_desc(&out->tx, idx_tx + i);
			td->addr = t;
			td->len = d->len;
			st->packets++;
		} else {
			st->drops++;
		}
		*xsk_ring_prod__fill_addr(&in->fq, idx_fq + i) = d->addr & ~((uint64_t)FRAME_SIZE - 1);
	}
	xsk_ring_prod__submit(&in->fq, n);
	xsk_ring_cons__release(&in->rx, n);
	if (ntx) {
		xsk_ring_prod__submit(&out->tx, ntx);
		kick(out);
	}
	return (int)n;
}

int main(int argc, char **argv)
{
	const char *mode = "auto";
	if (argc == 5 && strcmp(argv[3], "--mode") == 0)
		mode = argv[4];
	else if (argc != 3)
		die("usage: relay_xdp IF_A IF_B [--mode auto|drv|skb]");
	if (strcmp(mode, "auto") && strcmp(mode, "drv") && strcmp(mode, "skb"))
		die("--mode %s: expected auto, drv or skb", mode);
	struct rlimit unlim = {RLIM_INFINITY, RLIM_INFINITY};
	setrlimit(RLIMIT_MEMLOCK, &unlim);
	install_signals();
	static struct side side[2];
	setup_side(&side[0], argv[1], mode);
	setup_side(&side[1], argv[2], mode);
	const char *run_mode[2];
	for (int s = 0; s < 2; s++)
		run_mode[s] = (side[s].attach_flags & XDP_FLAGS_DRV_MODE) ? "drv" : "skb";
	printf("{\"type\":\"ready\",\"backend\":\"xdp\",\"pid\":%d,\"if_a\":\"%s\",\"if_b\":\"%s\","
	       "\"xdp_mode\":[\"%s\",\"%s\"],"
	       "\"zerocopy\":[%s,%s]}\n", getpid(), argv[1], argv[2], run_mode[0], run_mode[1],
	       side[0].zerocopy ? "true" : "false", side[1].zerocopy ? "true" : "false");
	fflush(stdout);
	struct dir_stats st[2] = {0};
	struct pollfd pfd[2] = {{.fd = side[0].fd, .events = POLLIN}, {.fd = side[1].fd, .events = POLLIN}};
	while (!g_stop) {
		int got = forward(&side[0], &side[1], &st[0]);
		got += forward(&side[1], &side[0], &st[1]);
		kick(&side[0]);
		kick(&side[1]);
		if (got == 0 && !tx_unsent(&side[0]) && !tx_unsent(&side[1])) {
			st[0].polls_idle++;
			poll(pfd, 2, 1000);
		}
	}
	for (int d = 0; d < 2; d++) {
		struct xdp_statistics xs;
		socklen_t len = sizeof(xs);
		if (getsockopt(side[d].fd, SOL_XDP, XDP_STATISTICS, &xs, &len) == 0)
			st[d].kernel_drops = xs.rx_dropped + xs.rx_ring_full + xs.rx_fill_ring_empty_descs;
	}
	print_stats("xdp", st);
	for (int s = 0; s < 2; s++) {
		xsk_socket__delete(side[s].xsk);
		bpf_xdp_detach(side[s].ifindex, side[s].attach_flags & ~XDP_FLAGS_UPDATE_IF_NOEXIST, NULL);
	}
	return 0;
}
