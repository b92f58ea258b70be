# Sourced by the live benches: two network namespaces joined by a veth
# pair with no addresses and IPv6 off, so that nothing injected reaches any
# host's stack; both are deleted when the script exits. Needs root and
# iproute2. Sets ns_c and dc (the capture side) and ns_i and di (the
# injecting side); PREFIX, the first argument, keeps two benches' names
# apart. Also defines `quiet PID`, which waits (at most a minute) until
# PID has used no CPU for 0.3 s: a capture that has set up its ring and
# sits polling it, or has worked off its backlog.
prefix=$1
ns_c=${prefix}_cap$$; ns_i=${prefix}_inj$$; dc=${prefix}c$$; di=${prefix}i$$
cleanup() { ip netns del "$ns_c" 2>/dev/null || true; ip netns del "$ns_i" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$ns_c"; ip netns add "$ns_i"
ip link add "$dc" type veth peer name "$di"
ip link set "$dc" netns "$ns_c"; ip link set "$di" netns "$ns_i"
for n in "$ns_c:$dc" "$ns_i:$di"; do
    ip netns exec "${n%%:*}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip netns exec "${n%%:*}" ip link set "${n##*:}" up
done
quiet() {
    local before after i
    after=$(awk '{print $14 + $15}' "/proc/$1/stat")
    for i in $(seq 200); do
        before=$after; sleep 0.3
        after=$(awk '{print $14 + $15}' "/proc/$1/stat")
        [ "$after" = "$before" ] && return 0
    done
}
