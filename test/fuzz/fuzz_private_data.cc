/*
 * xqp - libFuzzer target for the rdma_cm private data decoder.
 *
 *   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I src \
 *       test/fuzz/fuzz_private_data.cc src/wireup/private_data.cc -o fuzz_private_data
 *   ./fuzz_private_data -max_len=256 -max_total_time=30 \
 *       test/fuzz/corpus/private_data
 *
 * Built with -DXQP_FUZZ_STANDALONE (any compiler, no libFuzzer) it runs the
 * files given on the command line once each, e.g. the seed corpus as a
 * regression test.
 */
#include "wireup/private_data.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace xqp::wireup;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    std::string why;
    const auto  hello = decode(data, size, &why);
    if (!hello) {
        if (why.empty()) {
            std::fprintf(stderr, "decode failed without a reason\n");
            std::abort();
        }
        return 0;
    }

    /* accepted: at least the version's size, and those bytes are exactly
     * what encode() writes for the decoded value */
    const size_t need = (hello->version == kHelloVersionShare) ? kHelloSizeV2 : kHelloSize;
    if (size < need) {
        std::fprintf(stderr, "decode accepted %zu bytes\n", size);
        std::abort();
    }
    uint8_t buf[kHelloSizeV2];
    if (encode(*hello, buf, sizeof(buf)) != need) {
        std::fprintf(stderr, "encode failed for %s\n", to_string(*hello).c_str());
        std::abort();
    }
    if (std::memcmp(buf, data, need) != 0) {
        std::fprintf(stderr, "round trip differs for %s\n", to_string(*hello).c_str());
        std::abort();
    }
    const auto again = decode(buf, need, &why);
    if (!again || !(*again == *hello)) {
        std::fprintf(stderr, "re-decode differs for %s\n", to_string(*hello).c_str());
        std::abort();
    }
    return 0;
}

#ifdef XQP_FUZZ_STANDALONE
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; ++i) {
        FILE *f = std::fopen(argv[i], "rb");
        if (f == nullptr) {
            std::perror(argv[i]);
            return 1;
        }
        uint8_t buf[4096];
        const size_t n = std::fread(buf, 1, sizeof(buf), f);
        std::fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        std::printf("%s: %zu bytes ok\n", argv[i], n);
    }
    return 0;
}
#endif
