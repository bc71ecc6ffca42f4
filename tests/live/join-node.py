"""Join a virtual node to the cluster as `gnt-node add` does, without ssh (one machine).

Run by tests/live/ganeti-master.sh up2 with Ganeti's own Python (/usr/bin/python3, modules
under /usr/share/ganeti/3.0) in the master node's environment: `NODE ROOT`. Ganeti's
`AddNode` (lib/client/gnt_node.py) and `SetupNodeDaemon` (lib/bootstrap.py) send this same
input to node-daemon-setup over ssh on the new node, then submit OpNodeAdd; here the input is
piped to node-daemon-setup run as the node (its vcluster `cmd` wrapper).
"""

import json
import subprocess
import sys

from ganeti import cli, constants, opcodes, pathutils, ssconf, utils

node, root = sys.argv[1:3]
store = ssconf.SimpleStore()
data = {
    constants.NDS_CLUSTER_NAME: store.GetClusterName(),
    constants.NDS_NODE_DAEMON_CERTIFICATE: utils.ReadFile(pathutils.NODED_CERT_FILE),
    constants.NDS_HMAC: utils.ReadFile(pathutils.CONFD_HMAC_KEY),
    constants.NDS_SSCONF: store.ReadAll(),
    constants.NDS_START_NODE_DAEMON: True,
    constants.NDS_NODE_NAME: node,
}
setup = [f"{root}/{node}/cmd", pathutils.NODE_DAEMON_SETUP]
if subprocess.run(setup, input=json.dumps(data), text=True, check=False).returncode:
    sys.exit("node-daemon-setup failed")
cli.SubmitOpCode(opcodes.OpNodeAdd(node_name=node, node_setup=False))
