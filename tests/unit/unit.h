/* A minimal unit-test harness: CHECK counts failures, main returns them. */
#ifndef UFFDD_UNIT_H
#define UFFDD_UNIT_H

#include <stdio.h>

static int unit_failures, unit_checks;

#define CHECK(cond)                                                            \
	do {                                                                   \
		unit_checks++;                                                 \
		if (!(cond)) {                                                 \
			unit_failures++;                                       \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
		}                                                              \
	} while (0)

#define UNIT_DONE()                                                    \
	(printf("%d checks, %d failed\n", unit_checks, unit_failures), \
	 unit_failures ? 1 : 0)

#endif
