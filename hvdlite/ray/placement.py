"""Where Ray put a job's workers, in the terms of an hvdlite job: the host
identity of a Ray node and the GPUs its ranks see."""


def host_identity(node):
    """HVDLITE_HOSTNAME of the ranks on a Ray node: its IP and node id (one
    machine may host several Ray nodes; their ranks must not share memory
    segments as if they were one host's)."""
    node_id, ip = node[0], node[1]
    return f"{ip}-{node_id[:12]}"


def visible_devices(nodes):
    """{node id: CUDA_VISIBLE_DEVICES}: every GPU Ray gave the workers of a
    node, so that each rank sees its node's GPUs and pins the one of its
    local rank (torch.cuda.set_device(hvd.local_rank()))."""
    per_node = {}
    for node_id, _, gpu_ids in nodes:
        per_node.setdefault(node_id, set()).update(gpu_ids)
    return {node_id: ",".join(sorted(ids, key=lambda g: (len(g), g)))
            for node_id, ids in per_node.items() if ids}
