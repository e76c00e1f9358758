/**
 * What a fork's workspace copy runs, in whatever one-off sandbox its provider starts for it (a
 * container, a pod), as the run's user: copies /from into every directory it is given as an
 * argument, two at a time (under gVisor the copies' page cache counts against the copier's
 * memory), and fails when any copy failed. For `sh -c`, with `$0` set to any word.
 */
export const COPY_EACH = `printf '%s\\0' "$@" | xargs -0 -n 1 -P 2 sh -c 'cp -a -- /from/. "$0/"'`;
