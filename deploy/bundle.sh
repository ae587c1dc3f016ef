#!/usr/bin/env bash
# Makes a relocatable bundle of ktune: the binaries and every shared library
# they need (libpq, which they load when a PostgreSQL database is opened,
# included) except the C library family, libstdc++/libgcc_s (a newer system
# has newer ones), the CUDA driver and NVRTC (taken from the machine it runs
# on: ktune loads them at run time), and the CUDA runtime and cuBLAS that
# only cublas_bench links (the GPU machine's toolkit has them). This is how
# ktune runs on GPU nodes without the development packages.
#
#   deploy/bundle.sh [BUILD_DIR] [OUT_DIR]     (defaults: build/default bundle)
#
# Then, on the target: OUT_DIR/run.sh ktune devices
set -euo pipefail
build=${1:-build/default}
out=${2:-bundle}
[ -x "$build/server/ktune" ] || { echo "bundle: no $build/server/ktune; build first" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins=("$build/server/ktune")
[ -x "$build/server/ktuned" ] && bins+=("$build/server/ktuned")
# The worker processes' program, found by ktune and ktuned beside them.
[ -x "$build/server/ktune-worker" ] && bins+=("$build/server/ktune-worker")
for extra in "$build/tests/gpu_test" "$build/bench/tune_bench" "$build/bench/space_bench" \
  "$build/bench/concurrency_bench" "$build/bench/daemon_bench" "$build/bench/client_bench" \
  "$build/bench/compile_bench" "$build/bench/energy_probe" "$build/bench/cublas_bench"; do
  [ -x "$extra" ] && bins+=("$extra")
done
cp "${bins[@]}" "$out/bin/"
# Debug information stays in the build tree.
strip --strip-unneeded "$out"/bin/* 2>/dev/null || true

# libpq is loaded when a PostgreSQL database is first opened, so ldd does
# not list it: it comes with the libraries it needs.
pq=$(PATH="$PATH:/sbin:/usr/sbin" ldconfig -p | awk '$1 == "libpq.so.5" {print $NF; exit}')
[ -n "$pq" ] || { echo "bundle: libpq.so.5 is not installed here (apt-get install libpq5)" >&2; exit 1; }
{ for b in "${bins[@]}" "$pq"; do ldd "$b"; done; echo "libpq.so.5 => $pq"; } |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|ld-linux*|\
      libstdc++.so*|libgcc_s.so*|libcuda.so*|libnvrtc*|libnvidia-ml*|libcublas*|libcudart*) ;;
      *)
        # A library that cannot be copied fails the bundle (set -e); one
        # that cannot be stripped is kept as it is.
        cp -L "$lib" "$out/lib/"
        strip --strip-unneeded "$out/lib/$(basename "$lib")" 2>/dev/null || true
        ;;
    esac
  done

cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs a program of this bundle with the bundle's libraries first.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KTUNE_BIN="$here/bin/ktune"
prog=${1:?usage: run.sh PROGRAM [ARGS...]}
shift
exec "$here/bin/$prog" "$@"
RUN
chmod +x "$out/run.sh"
echo "bundle: $(du -sh "$out" | cut -f1) in $out ($(find "$out/lib" -type f | wc -l) libraries)"
