"""Architecture-aware placement: pods run only on nodes whose os/arch/variant their images
support (deploy/placement.md).

Admission (a MutatingAdmissionPolicy, or ``webhook`` before Kubernetes 1.34) gives new pods
the scheduling gate ``node-feature-agent.io/arch``; ``controller`` resolves each gated pod's
images with ``agent.images``, writes the required node affinity (``decide``, ``podspec``,
``nodeclasses``) and removes the gate, within the bounds of ``policy``.

Pure (no I/O): ``nodeclasses``, ``podspec``, ``decide``, ``policy``, ``admission``,
``workqueue``. At the edges: ``kube`` (API calls), ``informer``, ``lease``, ``lookups``,
``events``, ``metrics``, ``webhook``, ``clean``.
"""
