// SPDX-License-Identifier: Apache-2.0
/*
 * The ofi backend's listen handle as a peer could deliver it: real encodings, the same with bytes
 * mutated, mutated with the checksum made right again (so the later checks are reached), and
 * random bytes. A model of the documented layout (magic, version 1, address length 1..64,
 * reserved zero, this process's provider hash, FNV-1a checksum over the rest) says which must
 * decode; decoded fields must equal what was encoded. The decoder never reads past the 120
 * bytes (ASan in the sanitize suite) and says why it refuses (a WARN each time).
 * Usage: fuzz-ofi-handle [inputs] [seed]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz.h"
#include "mk/hash.h"
#include "ofi.h"

#define H_CSUM (MK_TP_HANDLE_MAX - 4)

/* The layout as docs/ofi.md describes it, checked independently of the decoder. */
static bool model_valid(const uint8_t *b)
{
	uint32_t magic, prov, csum;
	uint16_t reserved;

	memcpy(&magic, b, 4);
	memcpy(&reserved, b + 6, 2);
	memcpy(&prov, b + 8, 4);
	memcpy(&csum, b + H_CSUM, 4);
	return magic == MK_OFI_HANDLE_MAGIC && csum == mk_fnv1a32(b, H_CSUM) &&
	       b[4] == MK_OFI_WIRE_VERSION && prov == mk_ofi.prov_hash && reserved == 0 &&
	       b[5] >= 1 && b[5] <= MK_OFI_ADDR_MAX;
}

static void fix_csum(uint8_t *b)
{
	uint32_t csum = mk_fnv1a32(b, H_CSUM);

	memcpy(b + H_CSUM, &csum, 4);
}

int main(int argc, char **argv)
{
	long inputs = argc > 1 ? atol(argv[1]) : 20000, valid = 0, refused = 0;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x6f666968616e646cull;

	mk_ofi.prov_hash = 0x1234abcdu;
	printf("fuzz-ofi-handle: seed %#llx, %ld inputs\n", (unsigned long long)seed, inputs);
	for (long i = 0; i < inputs; i++) {
		struct mk_ofi_handle h = { .prov_hash = mk_ofi.prov_hash }, d;
		uint8_t b[MK_TP_HANDLE_MAX];
		int rc;

		fuzz_input(seed, i);
		h.nonce = fuzz_rng();
		h.addrlen = 1 + fuzz_rng() % MK_OFI_ADDR_MAX;
		for (size_t k = 0; k < h.addrlen; k++)
			h.addr[k] = (uint8_t)fuzz_rng();
		if (mk_ofi_handle_encode(&h, b) != 0)
			return 1;
		switch (fuzz_rng() % 4) {
		case 0: /* as sent */
			break;
		case 1: /* damaged in transit */
			b[fuzz_rng() % sizeof(b)] ^= (uint8_t)(1 + fuzz_rng() % 255);
			break;
		case 2: /* crafted: fields changed, checksum recomputed */
			for (int k = 0; k < 1 + (int)(fuzz_rng() % 3); k++)
				b[fuzz_rng() % H_CSUM] = (uint8_t)fuzz_rng();
			fix_csum(b);
			break;
		default:
			for (size_t k = 0; k < sizeof(b); k++)
				b[k] = (uint8_t)fuzz_rng();
			break;
		}
		rc = mk_ofi_handle_decode(b, &d);
		if ((rc == 0) != model_valid(b) || (rc != 0 && rc != -EINVAL)) {
			fprintf(stderr, "input %ld: decode %d, model says %s\n", i, rc,
				model_valid(b) ? "valid" : "invalid");
			fprintf(stderr, "replay: fuzz-ofi-handle %ld %#llx\n", i + 1,
				(unsigned long long)seed);
			return 1;
		}
		if (rc == 0 && (d.addrlen != b[5] || memcmp(d.addr, b + 24, d.addrlen) != 0 ||
				memcmp(&d.nonce, b + 16, 8) != 0)) {
			fprintf(stderr, "input %ld: decoded fields differ from the bytes\n", i);
			return 1;
		}
		valid += rc == 0;
		refused += rc != 0;
	}
	printf("fuzz-ofi-handle: %ld inputs, %ld decoded, %ld refused\n", inputs, valid, refused);
	return valid > 0 && refused > 0 ? 0 : 1;
}
