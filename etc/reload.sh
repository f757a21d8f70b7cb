#!/bin/sh
# Called by the rebuild-docs hook as: reload.sh <ref> <repository full name>
# Picks the environment from the pushed ref and asks the Kubernetes batch API for the matching build Job:
#   refs/heads/dev  -> namespace dev,  body mkdocs-dev.json
#   refs/heads/main -> namespace prod, body mkdocs-main.json
# Any other repository or ref is skipped with a log line and exit status 0.
#
# Environment: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (set by Kubernetes in every pod),
# SERVICEACCOUNT_DIR (default /var/run/secrets/kubernetes.io/serviceaccount) holding `token` and `ca.crt`.
#
# Opt-in: WAIT_FOR_JOB=<seconds> follows the created Job until it succeeds or fails, printing its pod's
# log as it comes: exit 0 only if the Job succeeded, 1 if it failed, 124 if the time ran out. It needs the
# read permissions of k8s/components/job-status (docs/docs-rebuild.md, "Waiting for the build").
set -eu

# The one repository this service builds; keep it equal to the value in hooks.yaml and the clone URL of
# the two Jobs (tests/docs_service checks that they agree).
SERVED_REPOSITORY=example-org/docs

ref=${1-}
repository=${2-}

# Request data only ever travels in quoted variables and printf arguments, never in an evaluated string.
if [ "$repository" != "$SERVED_REPOSITORY" ]; then
    printf 'reload.sh: skipping push to unsupported repo %s\n' "$repository"
    exit 0
fi

case $ref in
    refs/heads/dev)
        namespace=dev
        job_file=mkdocs-dev.json
        ;;
    refs/heads/main)
        namespace=prod
        job_file=mkdocs-main.json
        ;;
    *)
        printf 'reload.sh: skipping push to unsupported ref %s\n' "$ref"
        exit 0
        ;;
esac

# WAIT_FOR_JOB: a whole number of seconds; unset, empty or 0 means the script does not wait.
wait_seconds=${WAIT_FOR_JOB:-}
case $wait_seconds in
    *[!0-9]*)
        printf 'reload.sh: WAIT_FOR_JOB must be a whole number of seconds, not %s\n' "$wait_seconds" >&2
        exit 1
        ;;
esac
# Leading zeros dropped, so that shell arithmetic does not read the number as octal.
wait_seconds=${wait_seconds#"${wait_seconds%%[!0]*}"}
if [ "${#wait_seconds}" -gt 9 ]; then
    printf 'reload.sh: WAIT_FOR_JOB is too large: %s\n' "$wait_seconds" >&2
    exit 1
fi

# The Job bodies sit beside this script (in the pod: the ConfigMap mounted at /etc/webhook).
job_dir=$(dirname -- "$0")
job_path=$job_dir/$job_file
sa_dir=${SERVICEACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
api_host=${KUBERNETES_SERVICE_HOST:?KUBERNETES_SERVICE_HOST is not set}
api_port=${KUBERNETES_SERVICE_PORT:-443}

# An IPv6 service address must be bracketed inside a URL.
case $api_host in
    *:*) api_host="[$api_host]" ;;
esac
api="https://$api_host:$api_port"
url="$api/apis/batch/v1/namespaces/$namespace/jobs"

# Projected service-account tokens rotate, so the token is read afresh on every call.
token=$(cat -- "$sa_dir/token")

response=$(mktemp)
trap 'rm -f -- "$response"' EXIT
# A signal ends the script through `exit`, so the EXIT trap above still removes the file.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# The bearer header is fed to curl on stdin (-H @-) so the token never shows in the process list.
# --cacert pins trust to the cluster CA; TLS verification is never switched off.
if ! status=$(printf 'Authorization: Bearer %s\n' "$token" | curl --silent --show-error \
        --cacert "$sa_dir/ca.crt" \
        --connect-timeout 10 --max-time 60 \
        --request POST \
        --header @- \
        --header 'Content-Type: application/json' \
        --header 'Accept: application/json' \
        --data-binary "@$job_path" \
        --output "$response" \
        --write-out '%{http_code}' \
        "$url"); then
    printf 'reload.sh: job creation request to %s failed\n' "$url" >&2
    exit 1
fi

# Print the JSON string that follows the literal text $1 in the API's compact answer; the image has no jq.
# Escaped quotes inside the string (Forbidden messages quote the user name) are kept as they are.
json_string() {
    sed -n "s/.*$1\"\\([^\"\\\\]*\\(\\\\.[^\"\\\\]*\\)*\\)\".*/\\1/p" "$response" | head -n 1
}

case $status in
    2??)
        name=$(json_string '"metadata":{"name":')
        printf 'reload.sh: created job %s in namespace %s (HTTP %s)\n' "$name" "$namespace" "$status"
        ;;
    *)
        message=$(json_string '"message":')
        printf 'reload.sh: job creation in namespace %s rejected: HTTP %s: %s\n' \
            "$namespace" "$status" "${message:-$(cat -- "$response")}" >&2
        exit 1
        ;;
esac

[ -n "$wait_seconds" ] || exit 0
if [ -z "$name" ]; then
    printf 'reload.sh: the API did not name the job it created, so it cannot be followed\n' >&2
    exit 1
fi

# ---- WAIT_FOR_JOB: follow the Job just created until it ends or the time runs out. ----

deadline=$(($(date +%s) + wait_seconds))

seconds_left() {
    echo $((deadline - $(date +%s)))
}

# curl with the pod's credentials (token on stdin, trust in the cluster CA only), at most $1 seconds;
# the remaining arguments are curl's.
api_curl() {
    limit=$1
    shift
    # curl reads --max-time 0 as "no limit": with no time left, fail as curl's own timeout does.
    [ "$limit" -gt 0 ] || return 28
    printf 'Authorization: Bearer %s\n' "$(cat -- "$sa_dir/token")" | curl --silent --show-error \
        --cacert "$sa_dir/ca.crt" --connect-timeout 10 --max-time "$limit" --header @- "$@"
}

# GET the API path $1 into $response; prints the HTTP status (curl's own error on stderr if none).
api_get() {
    api_curl "$(seconds_left)" --header 'Accept: application/json' \
        --output "$response" --write-out '%{http_code}' "$api$1"
}

# An answer other than 200 from a read: say what was refused and why; a 403 names the missing component.
report_refusal() {
    message=$(json_string '"message":')
    printf 'reload.sh: %s: HTTP %s: %s\n' "$1" "$2" "${message:-$(cat -- "$response")}" >&2
    if [ "$2" = 403 ]; then
        printf 'reload.sh: WAIT_FOR_JOB needs the read permissions of k8s/components/job-status\n' >&2
    fi
}

# Print the log of each of the Job's pods not printed yet and no longer Pending; a running pod's log is
# followed until its container ends. The pods are found by the label the Job controller gives them.
followed=' '
print_new_logs() {
    status=$(api_get "/api/v1/namespaces/$namespace/pods?labelSelector=job-name%3D$name") || return 0
    if [ "$status" != 200 ]; then
        report_refusal "listing the pods of job $name" "$status"
        return 1
    fi
    # Pod names are DNS labels ([a-z0-9-]), so splitting the list on white space is safe.
    pods=$(grep -o '"metadata":{"name":"[^"]*"' "$response" | sed 's/.*"name":"//; s/"$//')
    for pod in $pods; do
        case $followed in *" $pod "*) continue ;; esac
        status=$(api_get "/api/v1/namespaces/$namespace/pods/$pod") || continue
        [ "$status" = 200 ] || continue
        [ "$(json_string '"phase":')" != Pending ] || continue
        printf 'reload.sh: log of pod %s:\n' "$pod"
        if api_curl "$(seconds_left)" --fail --no-buffer \
            "$api/api/v1/namespaces/$namespace/pods/$pod/log?follow=true"; then
            printf 'reload.sh: end of the log of pod %s\n' "$pod"
        elif [ "$(seconds_left)" -le 0 ]; then
            return 0
        else
            printf 'reload.sh: could not read the log of pod %s\n' "$pod" >&2
        fi
        followed="$followed$pod "
    done
}

while :; do
    if [ "$(seconds_left)" -le 0 ]; then
        printf 'reload.sh: job %s in namespace %s has not finished after WAIT_FOR_JOB=%s seconds; ' \
            "$name" "$namespace" "$wait_seconds" >&2
        printf 'it is left running in the cluster\n' >&2
        exit 124
    fi
    if ! status=$(api_get "/apis/batch/v1/namespaces/$namespace/jobs/$name"); then
        sleep 1
        continue
    fi
    if [ "$status" != 200 ]; then
        report_refusal "reading job $name in namespace $namespace" "$status"
        exit 1
    fi
    # The API server writes a condition's fields in a fixed order: type, then status.
    outcome=running
    if grep -q '"type":"Complete","status":"True"' "$response"; then
        outcome=succeeded
    elif grep -q '"type":"Failed","status":"True"' "$response"; then
        outcome=failed
        why="$(json_string '"reason":'): $(json_string '"message":')"
    fi
    print_new_logs || exit 1
    case $outcome in
        succeeded)
            printf 'reload.sh: job %s in namespace %s succeeded\n' "$name" "$namespace"
            exit 0
            ;;
        failed)
            printf 'reload.sh: job %s in namespace %s failed: %s\n' "$name" "$namespace" "$why" >&2
            exit 1
            ;;
    esac
    sleep 1
done
