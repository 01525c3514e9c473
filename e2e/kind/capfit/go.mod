// capfit: a runc wrapper for Docker on hosts whose capability bounding set is smaller than
// the kernel's (some VMs drop CAP_SYS_RESOURCE). Built by e2e/kind/build.sh; no dependencies.
module hami-dcu.local/e2e/kind/capfit

go 1.22
