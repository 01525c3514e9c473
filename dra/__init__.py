"""DRA mode: a kubelet DRA plugin for DCUs with consumable capacity (`hami-dcu dra-driver`)."""
