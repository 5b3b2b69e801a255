# Sourced by bench/gpu_acceptance.sh and bench/gpu_stages.sh: `install_wheels DIR` installs the wheels in DIR
# (bench/prepare_wheels.sh makes them where there is network) with pip --no-index --no-deps --target into a
# fresh temporary folder, and puts that folder first on PYTHONPATH. Nothing is fetched, nothing else changes
# (the machine's torch and the rest of its packages stay as they are). Uses $PYTHON.
install_wheels() {
    local dir=$1
    if ! ls "$dir"/*.whl >/dev/null 2>&1; then
        echo "--wheels $dir: no .whl files there (make them with bench/prepare_wheels.sh $dir where there is network)" >&2
        return 2
    fi
    local site
    site=$(mktemp -d)/site
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$dir"/*.whl \
        || { echo "installing the wheels of $dir failed (two versions of one package there stop pip: keep one)" >&2; return 2; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    echo "wheels of $dir installed into $site (first on PYTHONPATH): $(cd "$dir" && ls *.whl | sed 's/-py.*//; s/-cp.*//' | tr '\n' ' ')"
}
