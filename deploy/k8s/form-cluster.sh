#!/bin/sh
# Forms a kintsugi control plane, safely re-runnable: `init` on the first
# member only when every member is pristine (a second `init` is refused, and
# one on a member that lost its data would split the cluster), then
# `members add` for the others, which is a no-op for a member already in.
#
# KINTSUGI_MEMBERS: every member as ID=HOST:PORT (its advertised address),
# space-separated, first the one to form the cluster on. KINTSUGI_TOKEN: an
# admin-role token. KINTSUGI_CA_FILE, for a control plane with [tls]: the
# members are then reached over https, trusting that CA.
# Used by the compose file's `init` service and the Kubernetes Job.
set -eu
: "${KINTSUGI_MEMBERS:?every member as ID=HOST:PORT, space-separated}"
: "${KINTSUGI_TOKEN:?an admin-role token}"
scheme=${KINTSUGI_CA_FILE:+https://}

endpoints=""
for m in $KINTSUGI_MEMBERS; do
    endpoints="${endpoints:+$endpoints,}$scheme${m#*=}"
done

# Every member must answer before deciding: a member not yet started looks
# the same as one that is down.
total=0
pristine=0
for m in $KINTSUGI_MEMBERS; do
    addr=$scheme${m#*=}
    until status=$(kintsugi ctl --endpoints "$addr" --timeout 5s --json status 2>/dev/null); do
        echo "waiting for member ${m%%=*} at $addr"
        sleep 2
    done
    total=$((total + 1))
    case $status in
        *'"members": []'*) pristine=$((pristine + 1)) ;;
    esac
done

first=${KINTSUGI_MEMBERS%% *}
if [ "$pristine" -eq "$total" ]; then
    echo "all $total members are pristine: forming the cluster on member ${first%%=*}"
    kintsugi ctl --endpoints "$scheme${first#*=}" init
else
    echo "the cluster is formed ($pristine of $total members pristine): checking its membership"
fi
for m in ${KINTSUGI_MEMBERS#"$first"}; do
    kintsugi ctl --endpoints "$endpoints" members add "${m%%=*}" "${m#*=}"
done
kintsugi ctl --endpoints "$endpoints" status
