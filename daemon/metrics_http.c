/*
 * The metrics endpoint (metrics_http.h): just enough HTTP/1.x for a
 * scraper, and no more for anyone else. A request is read whole before
 * anything is answered, at most REQ_MAX bytes within IO_SECS; one
 * response, then the connection closes. GET /metrics only: another path
 * is 404, another method 405. At most CONNS_MAX connections at once:
 * more are closed at accept, so that no client can take the engine's
 * descriptors or memory.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics_http.h"
#include "daemon/metrics_text.h"

#define REQ_MAX 8192
#define IO_SECS 5
#define CONNS_MAX 16

static struct evconnlistener *listener;
static struct bufferevent *conns[CONNS_MAX]; /* freed at close too */
static int nconns;

static void
conn_done(struct bufferevent *bev)
{
	for (int i = 0; i < nconns; i++)
		if (conns[i] == bev) {
			conns[i] = conns[--nconns];
			break;
		}
	bufferevent_free(bev);
}

/* One response, the connection closed once it is written. */
static void
respond(struct bufferevent *bev, const char *status, const char *type,
	const char *extra, const char *body, size_t len, int head)
{
	struct evbuffer *out = bufferevent_get_output(bev);

	evbuffer_add_printf(
		out,
		"HTTP/1.1 %s\r\nContent-Type: %s\r\n"
		"Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
		status, type, len, extra);
	if (!head)
		evbuffer_add(out, body, len);
	bufferevent_disable(bev, EV_READ);
	bufferevent_enable(bev, EV_WRITE);
}

static void
error_page(struct bufferevent *bev, const char *status, const char *extra)
{
	char body[64];

	snprintf(body, sizeof(body), "%s\n", status);
	respond(bev, status, "text/plain; charset=utf-8", extra, body,
		strlen(body), 0);
}

/*
 * The request line and headers, whole: METHOD PATH HTTP/1.x. Prometheus
 * asks for OpenMetrics in its Accept header; others get the older text.
 */
static void
handle(struct bufferevent *bev, char *req)
{
	char *method, *path, *version, *save = NULL, *ws = NULL, *line, *q;
	int om = 0, head;
	size_t len;
	char *text;

	line = strtok_r(req, "\r\n", &save);
	method = line ? strtok_r(line, " ", &ws) : NULL;
	path = method ? strtok_r(NULL, " ", &ws) : NULL;
	version = path ? strtok_r(NULL, " ", &ws) : NULL;
	if (version == NULL || strncmp(version, "HTTP/1.", 7) != 0) {
		error_page(bev, "400 Bad Request", "");
		return;
	}
	while ((line = strtok_r(NULL, "\r\n", &save)) != NULL)
		if (strncasecmp(line, "Accept:", 7) == 0 &&
		    strstr(line, "application/openmetrics-text") != NULL)
			om = 1;
	if ((q = strchr(path, '?')) != NULL)
		*q = '\0';
	if (strcmp(path, "/metrics") != 0) {
		error_page(bev, "404 Not Found", "");
		return;
	}
	head = strcmp(method, "HEAD") == 0;
	if (!head && strcmp(method, "GET") != 0) {
		error_page(bev, "405 Method Not Allowed",
			   "Allow: GET, HEAD\r\n");
		return;
	}
	text = metrics_text(om, &len);
	respond(bev, "200 OK",
		om ? "application/openmetrics-text; version=1.0.0; "
		     "charset=utf-8"
		   : "text/plain; version=0.0.4; charset=utf-8",
		"", text, len, head);
	free(text);
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr end;
	char req[REQ_MAX + 1];
	size_t n;

	end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (end.pos < 0)
		end = evbuffer_search(in, "\n\n", 2, NULL);
	if (end.pos < 0 || end.pos > REQ_MAX) {
		if (evbuffer_get_length(in) >= REQ_MAX)
			error_page(bev, "431 Request Header Fields Too Large",
				   "");
		return;
	}
	n = evbuffer_remove(in, req, (size_t)end.pos);
	req[n] = '\0';
	handle(bev, req);
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0 &&
	    !(bufferevent_get_enabled(bev) & EV_READ))
		conn_done(bev);
}

/* A timeout, an error or the client's close: nothing more to do. */
static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	conn_done(bev);
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
	  int sl, void *arg)
{
	struct timeval tv = {IO_SECS, 0};
	struct bufferevent *bev;

	if (nconns >= CONNS_MAX ||
	    (bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE)) ==
		    NULL) {
		evutil_closesocket(fd);
		return;
	}
	conns[nconns++] = bev;
	bufferevent_setwatermark(bev, EV_READ, 0, REQ_MAX);
	bufferevent_setcb(bev, read_cb, write_cb, event_cb, NULL);
	bufferevent_set_timeouts(bev, &tv, &tv);
	bufferevent_enable(bev, EV_READ);
}

int
metrics_http_listen(const char *addr)
{
	struct sockaddr_storage ss;
	int sl = sizeof(ss);
	char buf[128];

	/* A port alone: loopback, as the endpoint says what runs here. */
	if (strspn(addr, "0123456789") == strlen(addr))
		snprintf(buf, sizeof(buf), "127.0.0.1:%s", addr);
	else
		snprintf(buf, sizeof(buf), "%s", addr);
	if (evutil_parse_sockaddr_port(buf, (struct sockaddr *)&ss, &sl) < 0 ||
	    (ss.ss_family == AF_INET &&
	     ((struct sockaddr_in *)&ss)->sin_port == 0) ||
	    (ss.ss_family == AF_INET6 &&
	     ((struct sockaddr_in6 *)&ss)->sin6_port == 0)) {
		log_warnx("metrics %s: want PORT or ADDR:PORT", addr);
		return -1;
	}
	listener = evconnlistener_new_bind(base, accept_cb, NULL,
					   LEV_OPT_CLOSE_ON_FREE |
						   LEV_OPT_REUSEABLE |
						   LEV_OPT_CLOSE_ON_EXEC,
					   16, (struct sockaddr *)&ss, sl);
	if (listener == NULL) {
		log_warn("metrics: cannot listen on %s", buf);
		return -1;
	}
	log_info("metrics on http://%s/metrics", buf);
	return 0;
}

void
metrics_http_close(void)
{
	if (listener)
		evconnlistener_free(listener);
	listener = NULL;
	while (nconns > 0)
		conn_done(conns[nconns - 1]);
}
