// Test helpers: convert float32 blobs between the plain nchw layout and the
// others (nhwc, nchw8c, nchw16c), so a routine can be run in any schema and
// compared with cpu/ref. Written plainly, independent of the adapt routines.
#pragma once

#include <softneuro/blob.hpp>

namespace softneuro::test {

/// A copy of a plain float32 blob in `layout`. Rank-4 blobs only for nhwc;
/// blocked layouts take rank >= 2 ([N,C,...], C padded with zeros).
Blob to_layout(const Blob& plain, Layout layout);
/// A plain (nchw) copy of a float32 blob in any layout.
Blob to_plain(const Blob& blob);
/// Whether the padded channels of a blocked blob hold zeros (true for other layouts).
bool padding_is_zero(const Blob& blob);
/// Fills all of a blob's memory, padding included, with `value` (e.g. NaN, to catch unwritten outputs).
void fill_bytes(Blob& blob, float value);

}  // namespace softneuro::test
