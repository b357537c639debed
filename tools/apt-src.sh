# shellcheck shell=bash
# Shared by tools/slurm-env.sh and tools/slurm-release.sh (sourced, not run): deb-src entries
# derived from this machine's own apt sources, so the project never names an archive itself.

# write_if_changed PATH CONTENT: writes atomically; status 1 when the file already holds CONTENT.
write_if_changed() {
    local path=$1 content=$2
    if [[ -f $path ]] && [[ $(cat "$path") == "$content" ]]; then
        return 1
    fi
    printf '%s\n' "$content" >"$path.tmp.$$"
    mv -f "$path.tmp.$$" "$path"
    return 0
}

# slurm_repo_uris: the repositories that serve slurmctld, as apt-cache policy lists them (a
# third-party repository offers no sources and would make an update fail), one a line.
slurm_repo_uris() {
    apt-cache policy slurmctld | awk '$1 ~ /^[0-9]+$/ && $2 ~ /:\/\// { sub(/\/+$/, "", $2); print $2 }' | sort -u
}

# deb_src_deb822 SKIP_FILE URIS [CODENAME SUITES]: every enabled deb822 stanza (in
# /etc/apt/sources.list.d/*.sources, except SKIP_FILE) of type 'deb' whose URIs serve slurmctld,
# copied with 'Types: deb-src' and comment lines dropped. Without CODENAME: stanzas that already
# have deb-src are left out (their sources are there). With CODENAME: only stanzas naming that
# suite, with their Suites replaced by SUITES (space-separated).
deb_src_deb822() {
    local skip=$1 uris=$2 codename=${3:-} suites=${4:-} f
    shopt -s nullglob
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ $f == "$skip" ]] && continue
        awk -v uris="$uris" -v codename="$codename" -v suites="$suites" '
            BEGIN {
                RS = ""; FS = "\n"
                n = split(uris, list, "\n")
                for (i = 1; i <= n; i++) wanted[list[i]] = 1
            }
            {
                out = ""; deb = 0; has_src = 0; enabled = 1; serves = 0; ours = (codename == "")
                for (i = 1; i <= NF; i++) {
                    line = $i
                    if (line ~ /^#/) continue
                    key = tolower(line)
                    if (key ~ /^types:/) {
                        if (line ~ /[ \t]deb([ \t]|$)/) deb = 1
                        if (line ~ /deb-src/) has_src = 1
                        line = "Types: deb-src"
                    } else if (key ~ /^enabled:[ \t]*no/) {
                        enabled = 0
                    } else if (key ~ /^uris:/) {
                        m = split(line, words, /[ \t]+/)
                        for (j = 2; j <= m; j++) {
                            uri = words[j]; sub(/\/+$/, "", uri)
                            if (uri in wanted) serves = 1
                        }
                    } else if (codename != "" && key ~ /^suites:/) {
                        m = split(line, words, /[ \t]+/)
                        for (j = 2; j <= m; j++) if (words[j] == codename) ours = 1
                        line = "Suites: " suites
                    }
                    out = out line "\n"
                }
                if (codename == "" && has_src) deb = 0
                if (deb && enabled && serves && ours) printf "%s\n", out
            }' "$f"
    done
    shopt -u nullglob
}

# deb_src_oneline SKIP_FILE URIS [CODENAME SUITES]: the same for one-line entries
# ("deb [options] URI suite components" in sources.list and *.list, except SKIP_FILE).
deb_src_oneline() {
    local skip=$1 uris=$2 codename=${3:-} suites=${4:-} f
    shopt -s nullglob
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ $f == "$skip" ]] && continue
        [[ -f $f ]] || continue
        awk -v uris="$uris" -v codename="$codename" -v suites="$suites" '
            BEGIN {
                n = split(uris, list, "\n"); for (i = 1; i <= n; i++) wanted[list[i]] = 1
                ns = split(suites, suite, " ")
            }
            $1 == "deb" {
                k = 2; opts = ""
                if ($2 ~ /^\[/) { while (k <= NF && $k !~ /\]$/) { opts = opts " " $k; k++ } opts = opts " " $k; k++ }
                uri = $k; sub(/\/+$/, "", uri)
                if (!(uri in wanted)) next
                if (codename == "") { sub(/^[ \t]*deb/, "deb-src"); print; next }
                if ($(k + 1) != codename) next
                rest = ""
                for (j = k + 2; j <= NF; j++) rest = rest " " $j
                for (s = 1; s <= ns; s++) printf "deb-src%s %s %s%s\n", opts, $k, suite[s], rest
            }' "$f"
    done
    shopt -u nullglob
}
