"""The edge: everything that touches sockets, files, clocks and trio.

Owns: the Kafka wire codec (`net/protocol/`, sans-IO, a lower layer than the rest of net/ so that the broker
and the coordinators can use it), the trio TCP server and the Kafka dispatcher (`server.py`,
`dispatcher.py`), the node runtime that drives `broker.node_state.NodeState` on trio and real sockets
(`node.py`), the Storage port over real files (`filestorage.py`), logging setup (`logs.py`) and the Kafka
client (`client/`: a sans-IO connection, a trio client and a blocking wrapper).

Never imports: cli/, simulations/, spark/ (they sit above it).
"""
