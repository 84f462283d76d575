"""raftlog: the state-machine framework of the metadata quorum.

- `raftlog.port`: the RaftLog port (propose / take_completions / take_committed / status), RaftConfig,
  RaftStatus, MemberProgress and the typed RaftError family.
- `raftlog.driver.RaftDriver`: the sans-IO implementation over pysyncobj 0.3.17 (the simulator drives it).
- `raftlog.patches`: the asserted pysyncobj patches (fixes A, B, D, E, H, I, J, K; routed clock, RNG and storage).
- `raftlog.journal`, `raftlog.snapshot`, `raftlog.codec`: durable journal, CBOR snapshots, wire messages.
- `raftlog.shell.RaftShell`: the trio edge (authenticated TCP streams, control RPC, `call_rpc`).

Importing this package imports nothing from pysyncobj or trio; import the submodule you need.
"""
