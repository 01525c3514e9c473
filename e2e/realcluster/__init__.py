"""The real-cluster backend: upstream etcd, kube-apiserver, kube-controller-manager and
kube-scheduler built from Go modules, the chart installed with helm, kubelet stand-ins that run
the chart's pods in their own network and mount namespaces."""
