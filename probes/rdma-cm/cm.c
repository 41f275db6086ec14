/* cm.c: rdma_cm on a software provider, the way issue 27's design would use it.
 *
 * A server (listening on SERVER_IP, port 0) and a client (from CLIENT_IP) in one process,
 * each on its own event channel and thread. The QPs are created by hand (ibv_create_qp on the
 * cm_id's verbs context, not rdma_create_qp) and moved INIT -> RTR -> RTS with the attributes
 * rdma_init_qp_attr gives; the client carries a 24-byte token in the connect's private data
 * and the server checks it before it creates anything. Then: one SEND client -> server, one
 * SEND server -> client carrying (addr, rkey) of a buffer registered for remote read, and one
 * RDMA READ of it by the client. A second connect with a wrong token must be rejected.
 *
 *   gcc -O2 -Wall cm.c -lrdmacm -libverbs -lpthread -o cm
 *   ./cm SERVER_IP CLIENT_IP [RNR_RETRY]    e.g. ./cm 10.77.0.2 10.77.0.1, ./cm fd00::2 fd00::1
 */
#define _GNU_SOURCE
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, "FATAL: " __VA_ARGS__); fprintf(stderr, " (errno=%d %s)\n", errno, strerror(errno)); exit(1); } while (0)

static const char *server_ip, *client_ip;
static int rnr_retry = 0;
static int resolve_ms = 2000;
static unsigned inline_ask = 64;
static volatile int listen_port = 0;
static const uint8_t TOKEN[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void addr_of(const char *ip, int port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *res;
	if (getaddrinfo(ip, NULL, &hints, &res)) DIE("getaddrinfo %s", ip);
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	if (ss->ss_family == AF_INET) ((struct sockaddr_in *)ss)->sin_port = htons(port);
	else ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ec, enum rdma_cm_event_type want, const char *who)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ec, &ev)) DIE("%s: rdma_get_cm_event", who);
	if (ev->event != want) {
		fprintf(stderr, "%s: got %s (status %d), wanted %s\n", who, rdma_event_str(ev->event), ev->status,
			rdma_event_str(want));
		exit(1);
	}
	return ev;
}

static void describe(struct rdma_cm_id *id, const char *who)
{
	struct ibv_port_attr pa;
	if (ibv_query_port(id->verbs, id->port_num, &pa)) DIE("query_port");
	union ibv_gid sgid;
	char g[64];
	memcpy(&sgid, &id->route.addr.addr.ibaddr.sgid, sizeof sgid); /* as rdma_cm keeps it */
	inet_ntop(AF_INET6, sgid.raw, g, sizeof g);
	printf("%s: device %s port %u link_layer %s transport %s sgid %s\n", who,
	       ibv_get_device_name(id->verbs->device), id->port_num,
	       pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "ethernet" : pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? "infiniband" : "?",
	       id->verbs->device->transport_type == IBV_TRANSPORT_IWARP ? "iwarp" : "ib", g);
}

struct side {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf; /* [0,64) recv, [64,128) send, [128,192) read sink / source */
};

static void make_qp(struct rdma_cm_id *id, struct side *s, const char *who)
{
	s->pd = ibv_alloc_pd(id->verbs);
	s->cq = ibv_create_cq(id->verbs, 32, NULL, NULL, 0);
	if (!s->pd || !s->cq) DIE("%s: pd/cq", who);
	s->buf = calloc(1, 4096);
	s->mr = ibv_reg_mr(s->pd, s->buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!s->mr) DIE("%s: reg_mr", who);
	struct ibv_qp_init_attr ia = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = inline_ask}};
	s->qp = ibv_create_qp(s->pd, &ia);
	if (!s->qp) DIE("%s: create_qp asking max_inline_data %u", who, inline_ask);
	printf("%s: qp %u, max_inline_data granted %u\n", who, s->qp->qp_num, ia.cap.max_inline_data);
}

static void move(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state st, const char *who)
{
	struct ibv_qp_attr a = {.qp_state = st};
	int mask = 0;
	if (rdma_init_qp_attr(id, &a, &mask)) DIE("%s: rdma_init_qp_attr(%d)", who, st);
	if (st == IBV_QPS_INIT) {
		printf("%s: INIT access flags from rdma_cm 0x%x (remote write %d, remote read %d); set to remote read only\n",
		       who, a.qp_access_flags, !!(a.qp_access_flags & IBV_ACCESS_REMOTE_WRITE),
		       !!(a.qp_access_flags & IBV_ACCESS_REMOTE_READ));
		a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	}
	if (st == IBV_QPS_RTR)
		printf("%s: RTR path mtu %d, is_global %d, dlid %u, sgid_index %u, max_dest_rd_atomic %u\n", who,
		       128 << a.path_mtu, a.ah_attr.is_global, a.ah_attr.dlid, a.ah_attr.grh.sgid_index, a.max_dest_rd_atomic);
	if (st == IBV_QPS_RTS) {
		printf("%s: RTS timeout %u retry %u rnr_retry %u max_rd_atomic %u\n", who, a.timeout, a.retry_cnt,
		       a.rnr_retry, a.max_rd_atomic);
	}
	if (ibv_modify_qp(qp, &a, mask)) DIE("%s: modify_qp(%d)", who, st);
}

static void post_recv(struct side *s)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = 64, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(s->qp, &wr, &bad)) DIE("post_recv");
}

static void post_send(struct side *s, const void *data, int len)
{
	memcpy(s->buf + 64, data, len);
	struct ibv_sge sge = {.addr = (uintptr_t)(s->buf + 64), .length = len, .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED}, *bad;
	if (ibv_post_send(s->qp, &wr, &bad)) DIE("post_send");
}

static struct ibv_wc wait_wc(struct side *s, const char *who)
{
	struct ibv_wc wc;
	double until = now_s() + 10;
	for (;;) {
		int n = ibv_poll_cq(s->cq, 1, &wc);
		if (n < 0) DIE("poll_cq");
		if (n == 1) break;
		if (now_s() > until) { fprintf(stderr, "%s: no completion within 10 s\n", who); exit(1); }
		usleep(100);
	}
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s: completion %s (opcode %d)\n", who, ibv_wc_status_str(wc.status), wc.opcode);
		exit(1);
	}
	return wc;
}

struct pd_token { char magic[4]; uint8_t version, flags; uint16_t reserved; uint8_t token[16]; };

static void *server(void *arg)
{
	(void)arg;
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *lid;
	struct sockaddr_storage ss;
	if (!ec || rdma_create_id(ec, &lid, NULL, RDMA_PS_TCP)) DIE("server: create id");
	addr_of(server_ip, 0, &ss);
	if (rdma_bind_addr(lid, (struct sockaddr *)&ss)) DIE("server: bind %s", server_ip);
	if (rdma_listen(lid, 8)) DIE("server: listen");
	printf("server: listening on %s port %u (bound to %s)\n", server_ip, ntohs(rdma_get_src_port(lid)),
	       lid->verbs ? ibv_get_device_name(lid->verbs->device) : "no device yet");
	listen_port = ntohs(rdma_get_src_port(lid));
	for (int round = 0; round < 3; round++) {
		struct rdma_cm_event *ev = expect(ec, RDMA_CM_EVENT_CONNECT_REQUEST, "server");
		struct rdma_cm_id *id = ev->id;
		const struct pd_token *t = ev->param.conn.private_data;
		int len = ev->param.conn.private_data_len;
		printf("server: connect request, private data %d bytes (on this fabric; 24 sent)\n", len);
		int ok = len >= (int)sizeof *t && !memcmp(t->magic, "RPCM", 4) && !memcmp(t->token, TOKEN, 16);
		rdma_ack_cm_event(ev);
		if (!ok) {
			uint8_t why[4] = {'R', 'P', 'C', 'X'};
			if (rdma_reject(id, why, sizeof why)) DIE("server: reject");
			printf("server: wrong token: rejected before any QP exists\n");
			rdma_destroy_id(id);
			continue;
		}
		describe(id, "server");
		struct side s;
		make_qp(id, &s, "server");
		move(id, s.qp, IBV_QPS_INIT, "server");
		post_recv(&s);
		move(id, s.qp, IBV_QPS_RTR, "server");
		move(id, s.qp, IBV_QPS_RTS, "server");
		struct rdma_conn_param cp = {.qp_num = s.qp->qp_num, .responder_resources = 1, .initiator_depth = 1,
			.rnr_retry_count = rnr_retry};
		if (rdma_accept(id, &cp)) DIE("server: accept");
		ev = expect(ec, RDMA_CM_EVENT_ESTABLISHED, "server");
		rdma_ack_cm_event(ev);
		printf("server: established\n");
		struct ibv_wc wc = wait_wc(&s, "server");
		printf("server: received %u bytes: %.*s\n", wc.byte_len, (int)wc.byte_len, s.buf);
		strcpy(s.buf + 128, "read me over rdma_cm");
		uint64_t desc[2] = {(uintptr_t)(s.buf + 128), s.mr->rkey};
		post_send(&s, desc, sizeof desc);
		wait_wc(&s, "server");
		ev = expect(ec, RDMA_CM_EVENT_DISCONNECTED, "server");
		rdma_ack_cm_event(ev);
		printf("server: disconnected\n");
		ibv_destroy_qp(s.qp);
		rdma_destroy_id(id);
	}
	return NULL;
}

static int client(const uint8_t *token)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_storage src, dst;
	if (!ec || rdma_create_id(ec, &id, NULL, RDMA_PS_TCP)) DIE("client: create id");
	addr_of(client_ip, 0, &src);
	addr_of(server_ip, listen_port, &dst);
	double t0 = now_s();
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, resolve_ms)) DIE("client: resolve_addr");
	rdma_ack_cm_event(expect(ec, RDMA_CM_EVENT_ADDR_RESOLVED, "client"));
	if (rdma_resolve_route(id, resolve_ms)) DIE("client: resolve_route");
	rdma_ack_cm_event(expect(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, "client"));
	describe(id, "client");
	struct side s;
	make_qp(id, &s, "client");
	move(id, s.qp, IBV_QPS_INIT, "client");
	post_recv(&s);
	struct pd_token t = {.magic = "RPCM", .version = 1};
	memcpy(t.token, token, 16);
	struct rdma_conn_param cp = {.qp_num = s.qp->qp_num, .responder_resources = 1, .initiator_depth = 1,
		.retry_count = 7, .rnr_retry_count = rnr_retry, .private_data = &t, .private_data_len = sizeof t};
	if (rdma_connect(id, &cp)) DIE("client: connect");
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ec, &ev)) DIE("client: get event");
	if (ev->event == RDMA_CM_EVENT_REJECTED) {
		printf("client: rejected (status %d, private data %d bytes: %.4s)\n", ev->status,
		       ev->param.conn.private_data_len,
		       ev->param.conn.private_data_len >= 4 ? (const char *)ev->param.conn.private_data : "");
		rdma_ack_cm_event(ev);
		ibv_destroy_qp(s.qp);
		rdma_destroy_id(id);
		rdma_destroy_event_channel(ec);
		return 1;
	}
	printf("client: %s\n", rdma_event_str(ev->event));
	enum rdma_cm_event_type got = ev->event;
	rdma_ack_cm_event(ev);
	if (got == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		move(id, s.qp, IBV_QPS_RTR, "client");
		move(id, s.qp, IBV_QPS_RTS, "client");
		if (rdma_establish(id)) DIE("client: establish");
	} else if (got != RDMA_CM_EVENT_ESTABLISHED) {
		fprintf(stderr, "client: unexpected %s\n", rdma_event_str(got));
		exit(1);
	}
	printf("client: connected in %.1f ms (address, route, connect)\n", (now_s() - t0) * 1e3);
	post_send(&s, "hello over rdma_cm", 18);
	wait_wc(&s, "client");
	struct ibv_wc wc = wait_wc(&s, "client");
	uint64_t desc[2];
	memcpy(desc, s.buf, sizeof desc);
	struct ibv_sge sge = {.addr = (uintptr_t)(s.buf + 128), .length = 32, .lkey = s.mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 3, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = desc[0], .rkey = (uint32_t)desc[1]}}, *bad;
	(void)wc;
	if (ibv_post_send(s.qp, &wr, &bad)) DIE("client: post read");
	wait_wc(&s, "client");
	printf("client: READ into a sink without remote write: \"%s\"\n", s.buf + 128);
	rdma_disconnect(id);
	ibv_destroy_qp(s.qp);
	rdma_destroy_id(id);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) { fprintf(stderr, "usage: %s SERVER_IP CLIENT_IP [RNR_RETRY [RESOLVE_MS [MAX_INLINE]]]\n", argv[0]); return 2; }
	server_ip = argv[1];
	client_ip = argv[2];
	if (argc > 3) rnr_retry = atoi(argv[3]);
	if (argc > 4) resolve_ms = atoi(argv[4]);
	if (argc > 5) inline_ask = atoi(argv[5]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	pthread_t th;
	pthread_create(&th, NULL, server, NULL);
	while (!listen_port) usleep(1000);
	if (client(TOKEN) != 0) { fprintf(stderr, "client: the good token was rejected\n"); return 1; }
	if (client(TOKEN) != 0) { fprintf(stderr, "client: the good token was rejected (2nd)\n"); return 1; }
	uint8_t wrong[16] = {0};
	if (client(wrong) != 1) { fprintf(stderr, "client: the wrong token was accepted\n"); return 1; }
	printf("cm: OK\n");
	return 0;
}
