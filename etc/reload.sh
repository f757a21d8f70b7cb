#!/bin/sh
# Called by the rebuild-docs hook as: reload.sh <ref> <repository full name>
# Picks the environment from the pushed ref and asks the Kubernetes batch API for the matching build Job:
#   refs/heads/dev  -> namespace dev,  body mkdocs-dev.json
#   refs/heads/main -> namespace prod, body mkdocs-main.json
# Any other repository or ref is skipped with a log line and exit status 0.
#
# Environment: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (set by Kubernetes in every pod),
# SERVICEACCOUNT_DIR (default /var/run/secrets/kubernetes.io/serviceaccount) holding `token` and `ca.crt`.
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
url="https://$api_host:$api_port/apis/batch/v1/namespaces/$namespace/jobs"

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
