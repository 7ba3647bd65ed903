"""The real-process set-up that the benchmarks and the tests share: a throwaway PostgreSQL server
(:mod:`bench.harness.postgres`), nodes in their own network namespaces (:mod:`bench.harness.netns`)
and staked nodes with the work they sign (:mod:`bench.harness.nodes`). It lives here, not in
``tests/``, because ``bench`` ships in the wheel and ``tests`` does not; the tests import it."""
