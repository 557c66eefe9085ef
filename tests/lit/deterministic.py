# The same input gives byte-identical reports.
# RUN: irshard compile %examples/mlp.py --mesh dp=2,tp=2 --grad --format json -o %t.first
# RUN: irshard compile %examples/mlp.py --mesh dp=2,tp=2 --grad --format json -o %t.second
# RUN: diff %t.first %t.second
# RUN: irshard compile %examples/heat1d.py --fn simulate_set --mesh x=4 -o %t.text1
# RUN: irshard compile %examples/heat1d.py --fn simulate_set --mesh x=4 -o %t.text2
# RUN: diff %t.text1 %t.text2
