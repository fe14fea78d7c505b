/*
 * uffdd --metrics ADDR:PORT: GET /metrics over HTTP, in the engine's loop
 * (the unprivileged side), for a Prometheus server to scrape.
 */
#ifndef UFFDD_METRICS_HTTP_H
#define UFFDD_METRICS_HTTP_H

/* Listens on "PORT" (loopback) or "ADDR:PORT"; 0, or -1 said why. */
int metrics_http_listen(const char *addr);
void metrics_http_close(void);

#endif
