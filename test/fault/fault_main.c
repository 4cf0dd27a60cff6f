// SPDX-License-Identifier: Apache-2.0
/*
 * mkernel-fault: the fault harness's command line (see fault.h).
 *
 * Usage: mkernel-fault SCENARIO [options] PLUGIN
 *   kill       --victim send|recv|both --trials N [--max-detect S]
 *   strangers  [--seconds S]
 *   soak       [--messages N] [--churn N]
 *   bad        [--case NAME]
 * Common: --provider P (default tcp;ofi_rxm), --seed N, --verbose (the module's INFO lines).
 * MKERNEL_FAULT_SCALE=F (0 < F < 1) scales trials and seconds by F, the soak's messages by F
 * squared, for a quick run.
 * Exit: 0 pass, 1 fail, 2 usage, 77 when the provider is not offered by this host's libfabric
 * (the only skip: with the provider present, a module that cannot run is a failure).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../loopback/provider_offered.h"
#include "fault.h"

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s kill|strangers|soak|bad [--provider P] [--trials N] [--victim "
		"send|recv|both]\n"
		"          [--max-detect S] [--messages N] [--churn N] [--seconds S] [--case "
		"NAME]\n"
		"          [--seed N]\n"
		"          [--verbose] PLUGIN\n",
		argv0);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "provider", required_argument, NULL, 'p' },
		{ "trials", required_argument, NULL, 't' },
		{ "victim", required_argument, NULL, 'v' },
		{ "max-detect", required_argument, NULL, 'd' },
		{ "messages", required_argument, NULL, 'm' },
		{ "churn", required_argument, NULL, 'C' },
		{ "seconds", required_argument, NULL, 's' },
		{ "case", required_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 'S' },
		{ "verbose", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct fault_opts o = {
		.provider = "tcp;ofi_rxm",
		.trials = 20,
		.seed = 1,
		.messages = 1000000,
		.seconds = 5,
		.victim = "both",
	};
	const char *scenario;
	int opt;

	if (argc < 2) {
		usage(argv[0]);
		return 2;
	}
	scenario = argv[1];
	optind = 2;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			o.provider = optarg;
			break;
		case 't':
			o.trials = atoi(optarg);
			break;
		case 'v':
			o.victim = optarg;
			break;
		case 'd':
			o.max_detect_s = atof(optarg);
			break;
		case 'm':
			o.messages = atol(optarg);
			break;
		case 'C':
			o.churn = atol(optarg);
			break;
		case 's':
			o.seconds = atof(optarg);
			break;
		case 'c':
			o.only = optarg;
			break;
		case 'S':
			o.seed = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'V':
			fault_verbose = 1;
			break;
		default:
			usage(argv[0]);
			return 2;
		}
	}
	if (optind != argc - 1 || o.trials < 1) {
		usage(argv[0]);
		return 2;
	}
	o.plugin = argv[optind];
	if (getenv("MKERNEL_FAULT_SCALE") != NULL) {
		/* a shorter run of the same scenarios (the sanitize suite's copy of the tier) */
		double f = atof(getenv("MKERNEL_FAULT_SCALE"));

		if (f > 0 && f < 1) {
			o.trials = o.trials * f < 3 ? 3 : (int)(o.trials * f);
			/*
			 * The soak by f squared: what a short run checks is the churn (a
			 * re-registration every 1,000 messages) and the leak check at exit, and a
			 * sanitizer makes every message several times dearer.
			 */
			o.messages =
				o.messages * f * f < 10000 ? 10000 : (long)(o.messages * f * f);
			o.seconds = o.seconds * f < 4 ? 4 : o.seconds * f;
		}
	}
	if (o.max_detect_s <= 0) {
		const char *t = getenv("MKERNEL_TIMEOUT");

		o.max_detect_s = (t != NULL ? atof(t) / 1000.0 : 30.0) + 2.0;
	}
	if (lb_provider_offered(o.provider) != 1) {
		printf("# libfabric offers no %s provider here\n", o.provider);
		return FAULT_EXIT_SKIP;
	}
	fault_srand(o.seed);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (strcmp(scenario, "kill") == 0)
		return fault_kill_main(&o);
	if (strcmp(scenario, "strangers") == 0)
		return fault_stranger_main(&o);
	if (strcmp(scenario, "soak") == 0)
		return fault_soak_main(&o);
	if (strcmp(scenario, "bad") == 0)
		return fault_bad_main(&o);
	usage(argv[0]);
	return 2;
}
