# Sourced by submit.sh and status.sh: how the jobs of one index's chain are named and found.
# Every job is named fs-<stage>@<tag>, the tag being the first 12 hex digits of the SHA-256 of the
# index as given (a folder made absolute, or an s3:// URL), so that the chain of one index is
# found among everyone's jobs.

# The tag of index $1.
chain_tag() {
  printf '%s' "$1" | sha256sum | cut -c1-12
}

# The job ids (array jobs once) of the chain of tag $1 that are queued or running.
chain_jobs() {
  squeue -h -o '%F %j' 2>/dev/null | awk -v tag="@$1" 'substr($2, length($2) - length(tag) + 1) == tag { print $1 }' | sort -un
}
