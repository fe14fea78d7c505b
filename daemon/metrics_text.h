/*
 * The daemon's metrics as text: the OpenMetrics format (what Prometheus
 * asks for, and uffd-client metrics prints), or Prometheus's older text
 * format for clients that ask for no other (promtool, curl).
 */
#ifndef UFFDD_METRICS_TEXT_H
#define UFFDD_METRICS_TEXT_H

#include <stddef.h>

/* A malloc'd text of *len bytes; om: OpenMetrics, else text 0.0.4. */
char *metrics_text(int om, size_t *len);

#endif
