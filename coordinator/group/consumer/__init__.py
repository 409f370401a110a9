"""The consumer group type of KIP-848, beside the classic one (`coordinator/group/classic/`).

Members heartbeat with ConsumerGroupHeartbeat; the coordinator computes the target assignment
with a server-side assignor (`coordinator/group/assignors/`) and moves each member towards it
partition by partition, revoking before assigning, so that no partition ever has two owners and
members that keep their partitions never stop. Pure like the classic core: commands and a clock
in, a `Result` out.
"""
